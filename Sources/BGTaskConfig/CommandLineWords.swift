// The command line of `ExecStart=` in `[Launch]` of an app file: split into words as systemd splits its own
// `ExecStart=`, and written back so that it splits the same way.

/// Splits and writes command lines in the quoting of systemd's `ExecStart=` (`systemd.syntax(7)`): words are
/// separated by whitespace; a word may be quoted whole or in part with `"..."` or `'...'`; a backslash escapes a quote,
/// a backslash or a space (`\"`, `\'`, `\\`, `\ `) and gives the C escapes `\n`, `\t` and `\r`; `%%` is a `%` and
/// `$$` a `$`, quoted or not, as systemd reads them. Other specifiers (`%n`), environment variables (`$NAME`,
/// `${NAME}`; any other `$`), other escapes and systemd's `@`, `-`, `:`, `+` and `!` prefixes are not read: the words
/// are the program and its arguments exactly as the app gets them (the daemon expands nothing, forked or as a unit),
/// so an `ExecStart=` that needs them is refused rather than run differently from what systemd would run.
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
        /// A `%` specifier, a `$` of an environment variable or an `ExecStart=` prefix, which the daemon does not
        /// expand.
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

    /// The separators of words: systemd's `WHITESPACE`.
    static func isSeparator(_ scalar: Unicode.Scalar) -> Bool {
        scalar == " " || scalar == "\t" || scalar == "\n" || scalar == "\r"
    }

    /// The words of `line`. Read scalar by scalar, as systemd reads bytes: a backslash or a quote followed by a
    /// combining mark is still a backslash or a quote.
    public static func split(_ line: String) throws(Problem) -> [String] {
        var words: [String] = []
        var word = String.UnicodeScalarView()
        var isInWord = false
        var quote: Unicode.Scalar?
        var iterator = line.unicodeScalars.makeIterator()
        while let scalar = iterator.next() {
            if scalar == "\0" { throw .nulCharacter }
            if scalar == "\\" {
                guard let escaped = iterator.next() else { throw .trailingBackslash }
                switch escaped {
                case "n": word.append("\n")
                case "t": word.append("\t")
                case "r": word.append("\r")
                case "\\", "\"", "'", " ": word.append(escaped)
                case "\0": throw .nulCharacter
                default: throw .unsupported("the escape \\\(Character(escaped))")
                }
                isInWord = true
                continue
            }
            if scalar == "%" || scalar == "$" {
                // Specifiers and variables are expanded inside quotes too, so `%` and `$` mean the same everywhere.
                guard iterator.next() == scalar else {
                    throw .unsupported(scalar == "%" ? "the % specifier" : "the $ of an environment variable")
                }
                word.append(scalar)
                isInWord = true
                continue
            }
            if let open = quote {
                if scalar == open { quote = nil } else { word.append(scalar) }
                continue
            }
            if scalar == "\"" || scalar == "'" {
                quote = scalar
                isInWord = true
            } else if isSeparator(scalar) {
                if isInWord { words.append(String(word)) }
                word = String.UnicodeScalarView()
                isInWord = false
            } else {
                word.append(scalar)
                isInWord = true
            }
        }
        if let open = quote { throw .unterminatedQuote(Character(open)) }
        if isInWord { words.append(String(word)) }
        guard let program = words.first, let prefix = program.unicodeScalars.first else { throw .empty }
        if "@-:+!".unicodeScalars.contains(prefix), program.unicodeScalars.count > 1 {
            throw .unsupported("the prefix \(Character(prefix)) of the program")
        }
        return words
    }

    /// `words` as one line that `split` reads back to the same words: `%` and `$` doubled; a word with a separator, a
    /// quote or a backslash (or an empty one) in double quotes, its `"` and `\` escaped, newline, tab and carriage
    /// return as `\n`, `\t` and `\r`.
    public static func join(_ words: [String]) -> String {
        words.map { word in
            let scalars = word.unicodeScalars
            let plain =
                !scalars.isEmpty && scalars.allSatisfy { !isSeparator($0) && !"\"'\\".unicodeScalars.contains($0) }
            var quoted = String.UnicodeScalarView()
            if !plain { quoted.append("\"") }
            for scalar in scalars {
                switch scalar {
                case "%": quoted.append(contentsOf: "%%".unicodeScalars)
                case "$": quoted.append(contentsOf: "$$".unicodeScalars)
                case "\"": quoted.append(contentsOf: "\\\"".unicodeScalars)
                case "\\": quoted.append(contentsOf: "\\\\".unicodeScalars)
                case "\n": quoted.append(contentsOf: "\\n".unicodeScalars)
                case "\t": quoted.append(contentsOf: "\\t".unicodeScalars)
                case "\r": quoted.append(contentsOf: "\\r".unicodeScalars)
                default: quoted.append(scalar)
                }
            }
            if !plain { quoted.append("\"") }
            return String(quoted)
        }.joined(separator: " ")
    }
}
