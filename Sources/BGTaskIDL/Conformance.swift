// Whether a JSON value is what the interface declares: the check behind the tests of the wire types and of what
// the daemon answers.

import BGTaskJSON
import BGTaskProtocol
import VarlinkIDL

extension VarlinkInterfaceDefinition {
    /// Checks `value` against an IDL type of this interface: every declared field present (optional ones as null
    /// at least), no extra fields, numbers integral for `int`. Returns a description of the first mismatch, or nil.
    public func mismatch(_ value: JSONValue, _ type: VarlinkType, path: String = "$") -> String? {
        switch (type, value) {
        case (.optional, .null): return nil
        case (.optional(let wrapped), _): return mismatch(value, wrapped, path: path)
        case (.bool, .bool), (.string, .string), (.float, .number), (.object, .object): return nil
        case (.int, .number(let number)): return number.rounded() == number ? nil : "\(path): \(number) is not an int"
        case (.named(let name), _):
            guard let definition = self.type(named: name) else { return "\(path): no type \(name)" }
            return mismatch(value, definition.type, path: path)
        case (.array(let element), .array(let elements)):
            for (index, item) in elements.enumerated() {
                if let problem = mismatch(item, element, path: "\(path)[\(index)]") { return problem }
            }
            return nil
        case (.dictionary(let element), .object(let members)):
            for (key, item) in members {
                if let problem = mismatch(item, element, path: "\(path).\(key)") { return problem }
            }
            return nil
        case (.enumeration(let names), .string(let string)):
            return names.contains(string) ? nil : "\(path): \(string) is not one of \(names)"
        case (.structure(let fields), .object(let members)):
            return mismatch(members, fields, path: path)
        default:
            return "\(path): \(value) is not a \(type)"
        }
    }

    /// Checks an object against a field list (a struct, a method's parameters or reply, an error's parameters), as
    /// `mismatch(_:_:path:)` does for structs.
    public func mismatch(_ members: [String: JSONValue], _ fields: [VarlinkField], path: String = "$") -> String? {
        let declared = Set(fields.map(\.name))
        if let extra = members.keys.sorted().first(where: { !declared.contains($0) }) {
            return "\(path): undeclared field \(extra)"
        }
        for field in fields {
            guard let member = members[field.name] else { return "\(path): field \(field.name) is missing" }
            if let problem = mismatch(member, field.type, path: "\(path).\(field.name)") { return problem }
        }
        return nil
    }
}
