// Generates the Swift wire types of an interface from its parsed definition and its bindings file: one Codable
// struct per declared type, one parameter and one reply struct per method, the method enum with its table of
// parameter types, and the enum of error names.
import VarlinkIDL

/// What the IDL cannot say about the Swift side, read from a `.bindings` file beside the `.varlink` file.
///
/// One directive a line; `#` starts a comment line:
/// - `import MODULE`: a module the generated file imports (the one the bound enums come from);
/// - `methods NAME`: the enum of the interface's methods (required);
/// - `errors NAME`: the enum of the interface's error names (required);
/// - `type IDLNAME SWIFTNAME`: the Swift name of a declared type (else its IDL name);
/// - `field STRUCT.FIELD SWIFTTYPE`: the Swift type of a string field (an enum of the vocabulary), named by the
///   generated struct and the field;
/// - `default STRUCT.FIELD VALUE`: the default of a required field in the memberwise initializer (optional fields
///   default to nil).
struct Bindings {
    var imports: [String] = []
    var methodEnum = ""
    var errorEnum = ""
    var typeNames: [String: String] = [:]
    var fieldTypes: [String: String] = [:]
    var defaults: [String: String] = [:]

    init(parsing text: String) throws(GenerationError) {
        for (index, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = rawLine.drop { $0 == " " }
            if line.isEmpty || line.hasPrefix("#") { continue }
            let words = line.split(separator: " ", maxSplits: 2).map(String.init)
            func fail(_ message: String) -> GenerationError {
                GenerationError("bindings line \(index + 1): \(message)")
            }
            switch (words.first, words.count) {
            case ("import", 2): imports.append(words[1])
            case ("methods", 2): methodEnum = words[1]
            case ("errors", 2): errorEnum = words[1]
            case ("type", 3): typeNames[words[1]] = words[2]
            case ("field", 3): fieldTypes[words[1]] = words[2]
            case ("default", 3): defaults[words[1]] = words[2]
            default: throw fail("expected import, methods, errors, type, field or default and its words")
            }
        }
        if methodEnum.isEmpty || errorEnum.isEmpty { throw GenerationError("bindings name no 'methods' or 'errors'") }
    }
}

/// A definition the generator cannot turn into Swift, or bindings that do not fit it.
struct GenerationError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// The Swift source of an interface's wire types.
struct WireTypeGenerator {
    let interface: VarlinkInterfaceDefinition
    let bindings: Bindings
    private var used: Set<String> = []

    init(interface: VarlinkInterfaceDefinition, bindings: Bindings) {
        self.interface = interface
        self.bindings = bindings
    }

    /// The whole generated file; every binding must have been used (a stale one names a field that is gone).
    mutating func source(sourceNames: String) throws(GenerationError) -> String {
        var out = "// Generated at build time by EmbedInterfaceTool from \(sourceNames); edit those, not this.\n"
        if !bindings.imports.isEmpty { out += "\n" + bindings.imports.map { "import \($0)\n" }.joined() }
        out += methodEnum()
        out += errorEnum()
        for type in interface.types {
            guard case .structure(let fields) = type.type else {
                throw GenerationError("type \(type.name) is not a struct: the generator makes structs only")
            }
            let swiftName = bindings.typeNames[type.name] ?? type.name
            out += try structure(
                swiftName, documentation: type.documentation, fields: fields,
                conformances: "Codable, Hashable, Sendable")
        }
        for method in interface.methods {
            let parameters = method.name + "Parameters"
            let reply = method.name + "Reply"
            out += try structure(
                parameters,
                documentation: "The parameters of `\(method.name)`."
                    + (method.documentation.isEmpty ? "" : "\n\n" + method.documentation),
                fields: method.parameters, conformances: "VarlinkMethodCall, Hashable",
                header: [
                    "public typealias Reply = \(reply)",
                    "public static let methodName = \(bindings.methodEnum).\(caseName(method.name)).qualifiedName",
                ])
            if method.reply.isEmpty {
                out += "\n/// The reply of `\(method.name)`: nothing.\npublic typealias \(reply) = EmptyReply\n"
            } else {
                out += try structure(
                    reply, documentation: "The reply of `\(method.name)`.", fields: method.reply,
                    conformances: "Codable, Hashable, Sendable")
            }
        }
        let unused = Set(bindings.fieldTypes.keys).union(bindings.defaults.keys).subtracting(used)
        if let stale = unused.sorted().first { throw GenerationError("bindings name \(stale), which is not a field") }
        for (idlName, _) in bindings.typeNames where interface.type(named: idlName) == nil {
            throw GenerationError("bindings name type \(idlName), which the interface does not declare")
        }
        return out
    }

    /// `BeginBackgroundTask` → `beginBackgroundTask`.
    private func caseName(_ member: String) -> String {
        member.prefix(1).lowercased() + member.dropFirst()
    }

    /// The first sentence of a documentation block, on one line.
    private func summary(_ documentation: String) -> String {
        let flat = documentation.split(whereSeparator: \.isNewline).joined(separator: " ")
        guard let end = flat.range(of: ". ") else { return flat }
        return String(flat[..<end.lowerBound]) + "."
    }

    /// `documentation` as `///` lines indented by `indent`.
    private func docComment(_ documentation: String, indent: String) -> String {
        guard !documentation.isEmpty else { return "" }
        return documentation.split(separator: "\n", omittingEmptySubsequences: false)
            .map { $0.isEmpty ? "\(indent)///\n" : "\(indent)/// \($0)\n" }.joined()
    }

    private func methodEnum() -> String {
        var out = "\n/// The methods of `\(interface.name)`; the raw value is the method's name within the interface.\n"
        out += "public enum \(bindings.methodEnum): String, CaseIterable, Sendable {\n"
        for method in interface.methods {
            out += docComment(summary(method.documentation), indent: "    ")
            out += "    case \(caseName(method.name)) = \"\(method.name)\"\n"
        }
        out += "\n    /// The parameter struct of the method, whose `Reply` is the reply's.\n"
        out += "    public var parametersType: any VarlinkMethodCall.Type {\n        switch self {\n"
        for method in interface.methods {
            out += "        case .\(caseName(method.name)): \(method.name)Parameters.self\n"
        }
        return out + "        }\n    }\n}\n"
    }

    private func errorEnum() -> String {
        var out = "\n/// The error names `\(interface.name)` declares, as they appear after the interface name.\n"
        out += "public enum \(bindings.errorEnum): String, CaseIterable, Sendable {\n"
        for error in interface.errors {
            out += docComment(summary(error.documentation), indent: "    ")
            out += "    case \(caseName(error.name)) = \"\(error.name)\"\n"
        }
        return out + "}\n"
    }

    /// A struct with one stored property per field and a memberwise initializer.
    private mutating func structure(
        _ name: String, documentation: String, fields: [VarlinkField], conformances: String, header: [String] = []
    ) throws(GenerationError) -> String {
        var out = "\n" + docComment(documentation, indent: "")
        out += "public struct \(name): \(conformances) {\n"
        for line in header { out += "    \(line)\n" }
        if !header.isEmpty { out += "\n" }
        var arguments: [String] = []
        for field in fields {
            let key = "\(name).\(field.name)"
            let binding = bindings.fieldTypes[key]
            if binding != nil {
                guard isString(field.type) else { throw GenerationError("bindings type \(key), which is no string") }
                used.insert(key)
            }
            let type = try swiftType(field.type, binding: binding, key: key)
            out += docComment(field.documentation, indent: "    ")
            out += "    public var \(field.name): \(type)\n"
            var argument = "\(field.name): \(type)"
            if let value = bindings.defaults[key] {
                used.insert(key)
                argument += " = \(value)"
            } else if case .optional = field.type {
                argument += " = nil"
            }
            arguments.append(argument)
        }
        if !fields.isEmpty { out += "\n" }
        out += "    /// A value with every field given; optional fields default to nil.\n"
        out += "    public init(\(arguments.joined(separator: ", "))) {\n"
        for field in fields { out += "        self.\(field.name) = \(field.name)\n" }
        return out + "    }\n}\n"
    }

    /// Whether the type is a string, or an optional string, array or dictionary of strings: what a binding may
    /// type with an enum.
    private func isString(_ type: VarlinkType) -> Bool {
        switch type {
        case .string: true
        case .optional(let inner), .array(let inner), .dictionary(let inner): isString(inner)
        default: false
        }
    }

    /// The Swift spelling of an IDL type; `binding`, for a string field, replaces `String`.
    private func swiftType(_ type: VarlinkType, binding: String?, key: String) throws(GenerationError) -> String {
        switch type {
        case .bool: return "Bool"
        case .int: return "Int"
        case .float: return "Double"
        case .string: return binding ?? "String"
        case .object: return "[String: JSONValue]"
        case .named(let name): return bindings.typeNames[name] ?? name
        case .optional(let wrapped): return try swiftType(wrapped, binding: binding, key: key) + "?"
        case .array(let element): return "[" + (try swiftType(element, binding: binding, key: key)) + "]"
        case .dictionary(let value): return "[String: " + (try swiftType(value, binding: binding, key: key)) + "]"
        case .structure, .enumeration:
            throw GenerationError("\(key) has an inline type: declare it with 'type' to generate it")
        }
    }
}
