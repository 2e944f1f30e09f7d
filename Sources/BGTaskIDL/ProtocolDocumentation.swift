// Generates docs/PROTOCOL.md, the Markdown reference of the interfaces, from their embedded IDL texts.

import BGTaskProtocol
// The parser and its model, for the users of the documentation and of the conformance checks.
@_exported import VarlinkIDL

/// The Markdown reference of bgtaskd's Varlink interfaces, generated from the `.varlink` files.
///
/// The tests compare `docs/PROTOCOL.md` with `generate()` and rewrite it when `BGTASK_REGENERATE_DOCS=1`, so the
/// reference cannot drift from the interface the daemon serves.
public enum ProtocolDocumentation {
    /// The whole of docs/PROTOCOL.md: `io.bgtask.Lifecycle` in full, then `org.varlink.service`.
    public static func generate() throws(VarlinkIDLError) -> String {
        let lifecycle = try VarlinkInterfaceDefinition(parsing: LifecycleInterface.description)
        let service = try VarlinkInterfaceDefinition(parsing: VarlinkServiceInterface.description)
        var output = """
            # bgtaskd Varlink protocol

            <!-- Generated from Sources/BGTaskProtocol/*.varlink by ProtocolDocumentation.generate(); \
            do not edit. Regenerate with: BGTASK_REGENERATE_DOCS=1 swift test --filter protocolDocumentationIsInSync -->

            bgtaskd speaks [Varlink](https://varlink.org) on a Unix stream socket: every message is a JSON object \
            followed by a NUL byte, calls are answered in order, a call with `"more": true` gets replies with \
            `"continues": true` until one without, and a call with `"oneway": true` gets no reply. Any Varlink \
            client can use it, for example `python3 -m varlink.cli call` or `varlinkctl call`.

            Errors are Varlink error replies: `{"error": "io.bgtask.Lifecycle.NoSuchApp", "parameters": \
            {"app": "..."}}`. A message that is not a well-formed call (invalid UTF-8 or JSON, not an object, a \
            missing or malformed `method`) gets `io.bgtask.Lifecycle.InvalidMessage` and the connection stays open \
            for the next; a message over `MessageSizeMax` (64 KiB by default) closes it. Unknown methods and \
            wrongly typed parameters get the `org.varlink.service` errors `MethodNotFound`, `InterfaceNotFound` \
            and `InvalidParameter`.

            Optional reply fields (`?type`) are always present, as `null` when they do not apply.


            """
        output += markdown(for: lifecycle)
        output += "\n"
        output += markdown(for: service)
        return output
    }

    /// The reference of one interface: its documentation, then its methods, types and errors.
    public static func markdown(for interface: VarlinkInterfaceDefinition) -> String {
        var output = "## Interface `\(interface.name)`\n\n"
        output += paragraph(interface.documentation)
        output += contents(of: interface)
        if !interface.methods.isEmpty {
            output += "### Methods\n\n"
            for method in interface.methods {
                output += anchor(interface, method.name)
                output += "#### \(method.name)\n\n"
                output +=
                    "```\nmethod \(method.name)\(signature(method.parameters)) -> \(signature(method.reply))\n```\n\n"
                output += paragraph(method.documentation)
                output += fieldTable("Parameters", method.parameters, in: interface)
                output += fieldTable("Reply", method.reply, in: interface)
            }
        }
        if !interface.types.isEmpty {
            output += "### Types\n\n"
            for type in interface.types {
                output += anchor(interface, type.name)
                output += "#### \(type.name)\n\n"
                output += "```\ntype \(type.name) \(type.type)\n```\n\n"
                output += paragraph(type.documentation)
                if case .structure(let fields) = type.type {
                    output += fieldTable("Fields", fields, in: interface)
                }
            }
        }
        if !interface.errors.isEmpty {
            output += "### Errors\n\n"
            for error in interface.errors {
                output += anchor(interface, error.name)
                output += "#### \(error.name)\n\n"
                output += "```\nerror \(error.name) \(signature(error.parameters))\n```\n\n"
                output += paragraph(error.documentation)
                output += fieldTable("Parameters", error.parameters, in: interface)
            }
        }
        return output
    }

    /// One line listing the members of each kind, linked to their sections.
    private static func contents(of interface: VarlinkInterfaceDefinition) -> String {
        var lines: [String] = []
        let groups: [(String, [String])] = [
            ("Methods", interface.methods.map(\.name)),
            ("Types", interface.types.map(\.name)),
            ("Errors", interface.errors.map(\.name)),
        ]
        for (title, names) in groups where !names.isEmpty {
            lines.append("- \(title): " + names.map { link(interface, $0) }.joined(separator: ", "))
        }
        return lines.joined(separator: "\n") + "\n\n"
    }

    /// `(name: type, ...)` on one line.
    private static func signature(_ fields: [VarlinkField]) -> String {
        "(" + fields.map { "\($0.name): \($0.type)" }.joined(separator: ", ") + ")"
    }

    /// A table of fields with their types (linked when they name a declared type) and documentation.
    private static func fieldTable(_ title: String, _ fields: [VarlinkField], in interface: VarlinkInterfaceDefinition)
        -> String
    {
        guard !fields.isEmpty else { return "\(title): none.\n\n" }
        var output = "\(title):\n\n| name | type | description |\n|---|---|---|\n"
        for field in fields {
            var type = "`\(field.type)`"
            if let referenced = field.type.referencedTypeNames.first {
                type = "[\(type)](#\(anchorName(interface, referenced)))"
            }
            output += "| `\(field.name)` | \(type) | \(cell(field.documentation)) |\n"
        }
        return output + "\n"
    }

    /// Documentation as Markdown paragraphs: comment lines are kept, empty ones separate paragraphs.
    private static func paragraph(_ documentation: String) -> String {
        documentation.isEmpty ? "" : documentation + "\n\n"
    }

    /// Documentation squeezed into one table cell.
    private static func cell(_ documentation: String) -> String {
        documentation.split(separator: "\n", omittingEmptySubsequences: true)
            .joined(separator: " ")
            .replacingAll("|", with: "\\|")
    }

    /// A stable HTML anchor, unique across interfaces (both interfaces declare `PermissionDenied`).
    private static func anchorName(_ interface: VarlinkInterfaceDefinition, _ member: String) -> String {
        (interface.name + "." + member).lowercased().replacingAll(".", with: "-")
    }

    private static func anchor(_ interface: VarlinkInterfaceDefinition, _ member: String) -> String {
        "<a id=\"\(anchorName(interface, member))\"></a>\n\n"
    }

    private static func link(_ interface: VarlinkInterfaceDefinition, _ member: String) -> String {
        "[\(member)](#\(anchorName(interface, member)))"
    }
}

extension String {
    /// The string with every occurrence of `target` replaced; a stdlib-only stand-in for Foundation's method.
    fileprivate func replacingAll(_ target: Character, with replacement: String) -> String {
        var result = ""
        for character in self {
            if character == target { result += replacement } else { result.append(character) }
        }
        return result
    }
}
