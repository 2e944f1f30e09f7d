// Turns a Varlink interface file into a Swift source file holding its text as a string constant.
//
// Usage: EmbedInterfaceTool INPUT.varlink OUTPUT.swift
// The constant is `EmbeddedInterfaceText.<name>`, where <name> is the file name without `.varlink` in
// lowerCamelCase (`io.bgtask.Lifecycle.varlink` gives `ioBgtaskLifecycle`). Every character that a Swift
// string literal would interpret is escaped, so the constant equals the file byte for byte.
import Foundation

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

let arguments = CommandLine.arguments
guard arguments.count == 3 else { fail("usage: EmbedInterfaceTool INPUT.varlink OUTPUT.swift") }
let inputURL = URL(fileURLWithPath: arguments[1])
let outputURL = URL(fileURLWithPath: arguments[2])
let bytes: Data
do {
    bytes = try Data(contentsOf: inputURL)
} catch {
    fail("cannot read \(inputURL.path): \(error)")
}
guard let text = String(validating: bytes, as: UTF8.self) else { fail("\(inputURL.path) is not valid UTF-8") }
let fileName = inputURL.lastPathComponent
let name = identifier(forBaseName: inputURL.deletingPathExtension().lastPathComponent)
let source = """
    // Generated at build time by EmbedInterfaceTool from \(fileName); edit that file, not this one.

    extension EmbeddedInterfaceText {
        /// The text of `\(fileName)`, byte for byte.
        static let \(name) = \"\"\"
    \(literalBody(text))
    \"\"\"
    }

    """
do {
    try Data(source.utf8).write(to: outputURL, options: .atomic)
} catch {
    fail("cannot write \(outputURL.path): \(error)")
}
