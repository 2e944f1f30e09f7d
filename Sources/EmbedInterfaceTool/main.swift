// Turns a Varlink interface file into Swift: its text as a string constant, and, given the interface's bindings
// file, its wire types (see WireTypes.swift).
//
// Usage: EmbedInterfaceTool INPUT.varlink OUTPUT.swift [BINDINGS TYPES.swift]
// The constant is `EmbeddedInterfaceText.<name>`, where <name> is the file name without `.varlink` in
// lowerCamelCase (`io.bgtask.Lifecycle.varlink` gives `ioBgtaskLifecycle`). Every character that a Swift
// string literal would interpret is escaped, so the constant equals the file byte for byte.
import Foundation
import VarlinkIDL

/// Writes `message` to fd 2 and exits with status 1 (the build reports the failing command).
func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("EmbedInterfaceTool: \(message)\n".utf8))
    exit(1)
}

/// The lowerCamelCase Swift identifier for an interface file's base name (`io.bgtask.Lifecycle`).
func identifier(forBaseName baseName: String) -> String {
    let words = baseName.split(whereSeparator: { !($0.isASCII && ($0.isLetter || $0.isNumber)) })
    var result = ""
    for (index, word) in words.enumerated() {
        result += index == 0 ? word.lowercased() : word.prefix(1).uppercased() + word.dropFirst()
    }
    if let first = result.first, first.isNumber { result = "_" + result }
    return result
}

/// The body of a multi-line string literal whose value is exactly `text`.
///
/// Lines of `text` become lines of the literal; the literal's closing delimiter follows the last piece,
/// so a trailing newline in the file is kept as an empty last line.
func literalBody(_ text: String) -> String {
    var body = ""
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\n": body += "\n"
        case "\\": body += "\\\\"
        case "\"": body += "\\\""
        case "\t": body += "\\t"
        case "\r": body += "\\r"
        case _ where scalar.value < 0x20 || scalar.value == 0x7F:
            body += "\\u{" + String(scalar.value, radix: 16) + "}"
        default: body.unicodeScalars.append(scalar)
        }
    }
    return body
}

/// The UTF-8 text of the file at `url`.
func readText(_ url: URL) -> String {
    let bytes: Data
    do {
        bytes = try Data(contentsOf: url)
    } catch {
        fail("cannot read \(url.path): \(error)")
    }
    guard let text = String(validating: bytes, as: UTF8.self) else { fail("\(url.path) is not valid UTF-8") }
    return text
}

/// Writes `source` to `url`.
func write(_ source: String, to url: URL) {
    do {
        try Data(source.utf8).write(to: url, options: .atomic)
    } catch {
        fail("cannot write \(url.path): \(error)")
    }
}

let arguments = CommandLine.arguments
guard arguments.count == 3 || arguments.count == 5 else {
    fail("usage: EmbedInterfaceTool INPUT.varlink OUTPUT.swift [BINDINGS TYPES.swift]")
}
let inputURL = URL(fileURLWithPath: arguments[1])
let text = readText(inputURL)
let fileName = inputURL.lastPathComponent
let name = identifier(forBaseName: inputURL.deletingPathExtension().lastPathComponent)
write(
    """
    // Generated at build time by EmbedInterfaceTool from \(fileName); edit that file, not this one.

    extension EmbeddedInterfaceText {
        /// The text of `\(fileName)`, byte for byte.
        static let \(name) = \"\"\"
    \(literalBody(text))
    \"\"\"
    }

    """, to: URL(fileURLWithPath: arguments[2]))

if arguments.count == 5 {
    let bindingsURL = URL(fileURLWithPath: arguments[3])
    do throws(GenerationError) {
        let interface: VarlinkInterfaceDefinition
        do {
            interface = try VarlinkInterfaceDefinition(parsing: text)
        } catch {
            throw GenerationError("\(fileName), \(error)")
        }
        var generator = WireTypeGenerator(interface: interface, bindings: try Bindings(parsing: readText(bindingsURL)))
        let source = try generator.source(sourceNames: "\(fileName) and \(bindingsURL.lastPathComponent)")
        write(source, to: URL(fileURLWithPath: arguments[4]))
    } catch {
        fail(error.description)
    }
}
