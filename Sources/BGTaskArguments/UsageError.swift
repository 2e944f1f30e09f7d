// The typed errors of a command line that does not fit the specs, each with its one-line message (exit 64).

/// A command line that does not fit the tool's or a subcommand's spec.
///
/// The tool prints `message` as one line, then the usage of `command` (or of the tool when nil), and exits with
/// `ExitCode.usage` (64, `EX_USAGE` from sysexits.h).
public struct UsageError: Error, Hashable, Sendable {
    /// What is wrong with the command line.
    public enum Kind: Hashable, Sendable {
        /// No subcommand was given.
        case missingSubcommand
        /// The word in subcommand position names none; `suggestion` is the closest subcommand, if one is close.
        case unknownSubcommand(String, suggestion: String?)
        /// An option the command does not accept, as written; `suggestion` is the closest accepted spelling.
        case unknownOption(String, suggestion: String?)
        /// An option that takes a value was last on the line, or followed by another option.
        case missingValue(option: String, valueName: String)
        /// A flag was given a value with `=` (`--json=yes`).
        case unexpectedValue(option: String)
        /// A required positional argument is missing.
        case missingArgument(name: String)
        /// A subcommand that runs a command line was given none.
        case missingCommand(name: String)
        /// A positional argument the command does not take.
        case extraArgument(String)
        /// A value that does not parse: the value, its placeholder, the option it was given to (nil for a
        /// positional argument) and why.
        case badValue(String, valueName: String, option: String?, reason: String)
        /// Two options that exclude each other were both given.
        case conflictingOptions(String, String)
        /// An option that means something only with another was given without it.
        case optionNeedsAnother(String, needs: String)
    }

    /// What is wrong.
    public var kind: Kind
    /// The subcommand whose usage follows the message; nil for the tool's own usage.
    public var command: String?

    /// An error in the command line of `command` (nil for the tool's own).
    public init(_ kind: Kind, command: String?) {
        self.kind = kind
        self.command = command
    }

    /// The message, one line, without the program name: `unknown option '--nmae' (did you mean '--name'?)`.
    public var message: String {
        switch kind {
        case .missingSubcommand:
            return "missing subcommand"
        case .unknownSubcommand(let word, let suggestion):
            return "unknown subcommand \(quoted(word))" + didYouMean(suggestion)
        case .unknownOption(let option, let suggestion):
            return "unknown option \(quoted(option))" + didYouMean(suggestion)
        case .missingValue(let option, let valueName):
            return "option \(quoted(option)) needs a value (\(valueName))"
        case .unexpectedValue(let option):
            return "option \(quoted(option)) takes no value"
        case .missingArgument(let name):
            return "missing argument \(name)"
        case .missingCommand(let name):
            return "missing \(name): give the command to run after '--'"
        case .extraArgument(let word):
            return "unexpected argument \(quoted(word))"
        case .badValue(let value, let valueName, let option?, let reason):
            return "invalid \(valueName) \(quoted(value)) for \(quoted(option)): \(reason)"
        case .badValue(let value, let valueName, nil, let reason):
            return "invalid \(valueName) \(quoted(value)): \(reason)"
        case .conflictingOptions(let first, let second):
            return "\(quoted(first)) and \(quoted(second)) cannot be used together"
        case .optionNeedsAnother(let option, let needed):
            return "\(quoted(option)) needs \(quoted(needed))"
        }
    }

    private func didYouMean(_ suggestion: String?) -> String {
        suggestion.map { " (did you mean \(quoted($0))?)" } ?? ""
    }
}

/// The longest part of a user's word echoed in a message; longer words are cut with an ellipsis, so a pasted
/// file does not flood the terminal.
public let quotedLengthMaximum = 64

/// `text` in single quotes for a one-line message: control characters, backslashes and quotes are escaped
/// (a newline in an argument must not break the message in two) and text longer than `limit` is cut (nil: never,
/// for a path the user needs whole).
public func quoted(_ text: String, limit: Int? = quotedLengthMaximum) -> String {
    var result = "'"
    var count = 0
    for scalar in text.unicodeScalars {
        if count == limit {
            result += "..."
            break
        }
        count += 1
        switch scalar {
        case "\n": result += "\\n"
        case "\t": result += "\\t"
        case "\r": result += "\\r"
        case "\\": result += "\\\\"
        case "'": result += "\\'"
        case _
        where scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
            || scalar.properties.generalCategory == .lineSeparator
            || scalar.properties.generalCategory == .paragraphSeparator:
            result += "\\u{" + String(scalar.value, radix: 16) + "}"
        default: result.unicodeScalars.append(scalar)
        }
    }
    return result + "'"
}

/// The candidate closest to `word` by edit distance, if close enough to be what was meant: at most a third of
/// the word's length in edits (at least one), or a word that `word` begins (`hist` for `history`).
func closestMatch(to word: String, among candidates: [String]) -> String? {
    guard !word.isEmpty else { return nil }
    let allowed = max(1, word.count / 3)
    var best: (candidate: String, distance: Int)?
    for candidate in candidates {
        let distance = editDistance(word, candidate)
        let isPrefix = word.count >= 2 && candidate.hasPrefix(word)
        guard distance <= allowed || isPrefix else { continue }
        // A prefix match ranks as one edit: closer than a guess, not closer than a typo of the whole word.
        let rank = isPrefix ? min(distance, 1) : distance
        if best == nil || rank < (best?.distance ?? Int.max) { best = (candidate, rank) }
    }
    return best?.candidate
}

/// The optimal string alignment distance: insertions, deletions, substitutions and swaps of two neighbours
/// (`stauts` is one edit from `status`) each cost one.
func editDistance(_ lhs: String, _ rhs: String) -> Int {
    let a = Array(lhs.unicodeScalars)
    let b = Array(rhs.unicodeScalars)
    if a.isEmpty { return b.count }
    if b.isEmpty { return a.count }
    var table = [[Int]](repeating: [Int](repeating: 0, count: b.count + 1), count: a.count + 1)
    for i in 0...a.count { table[i][0] = i }
    for j in 0...b.count { table[0][j] = j }
    for i in 1...a.count {
        for j in 1...b.count {
            let cost = a[i - 1] == b[j - 1] ? 0 : 1
            var distance = min(table[i - 1][j] + 1, table[i][j - 1] + 1, table[i - 1][j - 1] + cost)
            if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                distance = min(distance, table[i - 2][j - 2] + 1)
            }
            table[i][j] = distance
        }
    }
    return table[a.count][b.count]
}
