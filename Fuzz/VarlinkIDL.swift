// libFuzzer target: the Varlink IDL parser on any text.
//
// Asserts that a refusal names a position inside the text, and that an accepted interface, written back out as
// IDL with its documentation as comment blocks, parses to the same definition (names, types, fields, order and
// documentation).
import BGTaskIDL
import BGTaskProtocol

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzVarlinkIDL(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: start, count: count), as: UTF8.self)
    let definition: VarlinkInterfaceDefinition
    do throws(VarlinkIDLError) {
        definition = try VarlinkInterfaceDefinition(parsing: text)
    } catch {
        let lines = text.utf8.lazy.filter { $0 == UInt8(ascii: "\n") }.count + 1
        precondition(error.line >= 1 && error.line <= lines, "error line \(error.line) outside the text: \(error)")
        precondition(error.column >= 1, "error column \(error.column): \(error)")
        _ = error.description
        return 0
    }
    let rendered = render(definition)
    do throws(VarlinkIDLError) {
        let reparsed = try VarlinkInterfaceDefinition(parsing: rendered)
        precondition(reparsed == definition, "the interface changed when written back out:\n\(rendered)")
    } catch {
        preconditionFailure("the interface written back out is refused (\(error)):\n\(rendered)")
    }
    return 0
}

/// The interface as IDL text: one member per paragraph, one field per line, documentation above each.
private func render(_ definition: VarlinkInterfaceDefinition) -> String {
    var text = comment(definition.documentation, indent: "") + "interface \(definition.name)\n"
    for type in definition.types {
        text += "\n" + comment(type.documentation, indent: "") + "type \(type.name) "
        text += render(type.type, indent: "") + "\n"
    }
    for method in definition.methods {
        text += "\n" + comment(method.documentation, indent: "") + "method \(method.name)"
        text += render(.structure(method.parameters), indent: "") + " -> "
        text += render(.structure(method.reply), indent: "") + "\n"
    }
    for error in definition.errors {
        text += "\n" + comment(error.documentation, indent: "") + "error \(error.name) "
        text += render(.structure(error.parameters), indent: "") + "\n"
    }
    return text
}

/// A type expression; a struct puts each field on its own line below its documentation.
private func render(_ type: VarlinkType, indent: String) -> String {
    switch type {
    case .bool, .int, .float, .string, .object, .named, .enumeration: return type.description
    case .optional(let wrapped): return "?" + render(wrapped, indent: indent)
    case .array(let element): return "[]" + render(element, indent: indent)
    case .dictionary(let value): return "[string]" + render(value, indent: indent)
    case .structure(let fields):
        if fields.isEmpty { return "()" }
        let inner = indent + "  "
        let lines = fields.map { field in
            comment(field.documentation, indent: inner) + inner + field.name + ": " + render(field.type, indent: inner)
        }
        return "(\n" + lines.joined(separator: ",\n") + "\n" + indent + ")"
    }
}

/// The comment block documenting what follows it; nothing for empty documentation. Split at the scalar, since
/// a `\r` before a newline makes one `Character` with it.
private func comment(_ documentation: String, indent: String) -> String {
    if documentation.isEmpty { return "" }
    return documentation.unicodeScalars.split(separator: "\n", omittingEmptySubsequences: false)
        .map { indent + "# " + String($0) + "\n" }.joined()
}
