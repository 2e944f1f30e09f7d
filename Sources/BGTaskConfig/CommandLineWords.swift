// The command line of `ExecStart=` in `[Launch]` of an app file: split into words as systemd splits its own
// `ExecStart=`, and written back so that it splits the same way.

/// Splits and writes command lines in the quoting of systemd's `ExecStart=` (`systemd.syntax(7)`): words are
/// separated by whitespace; a word may be quoted whole or in part with `"..."` or `'...'`; a backslash escapes a quote,
/// a backslash or a space (`\"`, `\'`, `\\`, `\ `) and gives the C escapes `\n`, `\t` and `\r`; `%%` is a `%`.
/// Other specifiers (`%n`), other escapes and systemd's `@`, `-`, `:`, `+` and `!` prefixes are not read: the words
/// are the program and its arguments as written, so an `ExecStart=` that needs them is refused rather than run
/// differently from what systemd would run.
public enum CommandLineWords {
    /// Why a command line does not split.
    public enum Problem: Error, Hashable, Sendable, CustomStringConvertible {
        /// Nothing but whitespace.
        case empty
        /// A quote opened and never closed.
        case unterminatedQuote(Character)
        /// A backslash with nothing after it.
        case trailingBackslash
        /// A NUL byte, which no argument can hold.
        case nulCharacter
        /// A `%` specifier or an `ExecStart=` prefix, which the daemon does not expand.
        case unsupported(String)

        public var description: String {
            switch self {
            case .empty: "no command"
            case .unterminatedQuote(let quote): "a \(quote) quote is never closed"
            case .trailingBackslash: "a backslash ends the line"
            case .nulCharacter: "a NUL character"
            case .unsupported(let what): "\(what) is not supported here"
            }
        }
    }

    /// The words of `line`.
    public static func split(_ line: String) throws(Problem) -> [String] {
        var words: [String] = []
        var word = ""
        var isInWord = false
        var quote: Character?
        var iterator = line.makeIterator()
        while let character = iterator.next() {
            if character == "\0" { throw .nulCharacter }
            if character == "\\" {
                guard let escaped = iterator.next() else { throw .trailingBackslash }
                if escaped == "\0" { throw .nulCharacter }
                switch escaped {
                case "n": word.append("\n")
                case "t": word.append("\t")
                case "r": word.append("\r")
                case "\\", "\"", "'", " ": word.append(escaped)
                default: throw .unsupported("the escape \\\(escaped)")
                }
                isInWord = true
                continue
            }
            if character == "%" {
                // Specifiers are expanded inside quotes too, so `%` means the same everywhere.
                guard iterator.next() == "%" else { throw .unsupported("the % specifier") }
                word.append("%")
                isInWord = true
                continue
            }
            if let open = quote {
                if character == open { quote = nil } else { word.append(character) }
                continue
            }
            if character == "\"" || character == "'" {
                quote = character
                isInWord = true
            } else if character.isWhitespace {
                if isInWord { words.append(word) }
                word = ""
                isInWord = false
            } else {
                word.append(character)
                isInWord = true
            }
        }
        if let open = quote { throw .unterminatedQuote(open) }
        if isInWord { words.append(word) }
        guard let program = words.first, !program.isEmpty else { throw .empty }
        if let prefix = program.first, "@-:+!".contains(prefix), program.count > 1 {
            throw .unsupported("the prefix \(prefix) of the program")
        }
        return words
    }

    /// `words` as one line that `split` reads back to the same words: `%` doubled; a word with whitespace, a quote
    /// or a backslash (or an empty one) in double quotes, its `"` and `\` escaped, newline, tab and carriage return as
    /// `\n`, `\t` and `\r`.
    public static func join(_ words: [String]) -> String {
        words.map { word in
            let plain = !word.isEmpty && word.allSatisfy { !$0.isWhitespace && !"\"'\\".contains($0) }
            guard !plain else { return word.replacing("%", with: "%%") }
            var quoted = "\""
            for character in word {
                switch character {
                case "\"": quoted += "\\\""
                case "\\": quoted += "\\\\"
                case "\n": quoted += "\\n"
                case "\t": quoted += "\\t"
                case "\r": quoted += "\\r"
                case "%": quoted += "%%"
                default: quoted.append(character)
                }
            }
            return quoted + "\""
        }.joined(separator: " ")
    }
}
