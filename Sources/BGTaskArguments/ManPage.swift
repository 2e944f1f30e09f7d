// Generates the bgtask(1) manual page in roff from the same specs the parser and the help use.

/// The roff source of `docs/man/bgtask.1`, generated from a `ToolSpec`.
///
/// A test compares the committed file with `generate(_:)` and rewrites it when `BGTASK_REGENERATE_DOCS=1`, so
/// the page cannot drift from the parser.
public enum ManPage {
    /// The manual section: user commands.
    static let section = "1"

    /// The whole page: NAME, SYNOPSIS, DESCRIPTION, COMMANDS, OPTIONS, ENVIRONMENT, EXIT STATUS, EXAMPLES,
    /// SEE ALSO.
    public static func generate(_ tool: ToolSpec) -> String {
        var page: [String] = [
            #".\" Generated from the command specs of \(tool.name) by ManPage.generate(_:); do not edit."#,
            #".\" Regenerate with: BGTASK_REGENERATE_DOCS=1 swift test --filter manPageIsInSync"#,
            ".TH \(tool.name.uppercased()) \(section) \"\" \"\(tool.package) \(tool.version)\" \"User Commands\"",
            // No hyphenation and a ragged right margin: option names and placeholders must not be split.
            ".nh",
            ".ad l",
            ".SH NAME",
            "\(escape(tool.name)) \\- \(escape(lowercasingFirst(tool.abstract)))",
            ".SH SYNOPSIS",
        ]
        let globals = tool.globalOptions.map(synopsis) + tool.globalFlags.map(synopsis)
        let rest = tool.commands.isEmpty ? [] : ["\\fISUBCOMMAND\\fR", "[\\fIARGUMENTS\\fR...]"]
        page += synopsisLines(command: tool.name, items: globals + rest)
        for command in tool.commands {
            page += synopsisLines(command: "\(tool.name) \(command.name)", items: synopsis(command))
        }
        page.append(".SH DESCRIPTION")
        page += paragraphs(tool.discussion)
        page.append(".SH COMMANDS")
        for command in tool.commands { page += commandSection(command, tool: tool) }
        page.append(".SH OPTIONS")
        page.append("These options are accepted before or after any subcommand.")
        for option in tool.globalOptions { page += item(label(option), HelpFormatter.description(option)) }
        for flag in tool.globalFlags + [BuiltinFlags.help, BuiltinFlags.version] {
            page += item(label(flag), flag.help)
        }
        page.append(".SH ENVIRONMENT")
        for variable in tool.environment { page += item("\\fB\(escape(variable.name))\\fR", variable.help) }
        page.append(".SH \"EXIT STATUS\"")
        for status in tool.exitStatuses { page += item("\\fB\(escape(status.status))\\fR", status.meaning) }
        page.append(".SH EXAMPLES")
        for example in tool.commands.flatMap(\.examples) {
            page += [".PP", ".nf", ".RS 4", "\\fB\(escape(example.commandLine))\\fR", ".RE", ".fi"]
            page += [".RS 8", escape(example.explanation), ".RE"]
        }
        page.append(".SH \"SEE ALSO\"")
        page.append(tool.seeAlso.map(reference).joined(separator: ",\n"))
        return page.joined(separator: "\n") + "\n"
    }

    /// One subcommand: its synopsis, abstract, discussion, arguments and options.
    private static func commandSection(_ spec: CommandSpec, tool: ToolSpec) -> [String] {
        var lines = [".SS \"\(tool.name) \(spec.name)\""]
        lines += synopsisLines(command: "\(tool.name) \(spec.name)", items: synopsis(spec))
        lines += paragraphs(spec.abstract + ".")
        lines += paragraphs(spec.discussion)
        for argument in spec.arguments {
            lines += item("\\fI\(escape(argument.name))\\fR" + (argument.isCommand ? "..." : ""), argument.help)
        }
        for option in spec.options { lines += item(label(option), HelpFormatter.description(option)) }
        for flag in spec.flags { lines += item(label(flag), flag.help) }
        return lines
    }

    // MARK: Pieces

    /// A synopsis paragraph: the command in bold, then its items (already in roff).
    private static func synopsisLines(command: String, items: [String]) -> [String] {
        [".PP", "\\fB\(escape(command))\\fR " + items.joined(separator: " ")]
    }

    private static func synopsis(_ spec: CommandSpec) -> [String] {
        let plain = spec.arguments.filter { !$0.isCommand }.map { argument in
            argument.isOptional ? "[\\fI\(escape(argument.name))\\fR]" : "\\fI\(escape(argument.name))\\fR"
        }
        let command = spec.commandArgument.map { ["\\fB\\-\\-\\fR", "\\fI\(escape($0.name))\\fR..."] } ?? []
        return plain + spec.options.map(synopsis) + spec.flags.map(synopsis) + command
    }

    private static func synopsis(_ option: OptionSpec) -> String {
        // An unpaddable space (`\ `) keeps an option and its value on one line.
        "[\\fB\(escape(option.longForm))\\fR\\ \\fI\(escape(option.valueName))\\fR]"
    }

    private static func synopsis(_ flag: FlagSpec) -> String {
        "[\\fB\(escape(flag.longForm))\\fR]"
    }

    private static func label(_ option: OptionSpec) -> String {
        (option.shortName.map { "\\fB\\-\($0)\\fR, " } ?? "")
            + "\\fB\(escape(option.longForm))\\fR \\fI\(escape(option.valueName))\\fR"
    }

    private static func label(_ flag: FlagSpec) -> String {
        (flag.shortName.map { "\\fB\\-\($0)\\fR, " } ?? "") + "\\fB\(escape(flag.longForm))\\fR"
    }

    /// A tagged paragraph: the label on its own line, the text indented below.
    private static func item(_ label: String, _ text: String) -> [String] {
        [".TP", label, escape(text)]
    }

    /// Paragraphs separated by `.PP`.
    private static func paragraphs(_ text: String) -> [String] {
        HelpFormatter.paragraphs(text).flatMap { [".PP", escape($0)] }
    }

    /// `name(section)` as a reference: `.BR name (section)`.
    private static func reference(_ page: String) -> String {
        guard let open = page.firstIndex(of: "("), page.hasSuffix(")") else { return "\\fB\(escape(page))\\fR" }
        return "\\fB\(escape(String(page[..<open])))\\fR\(escape(String(page[open...])))"
    }

    /// `Control bgtaskd...` as `control bgtaskd...`, for the NAME line's lower-case convention.
    private static func lowercasingFirst(_ text: String) -> String {
        guard let first = text.first else { return text }
        return first.lowercased() + text.dropFirst()
    }

    /// Text made safe for a roff text line: backslashes become `\e`, hyphens `\-` (so options and command lines
    /// copy as ASCII), and a leading `.` or `'`, which would start a request, is guarded with `\&`.
    static func escape(_ text: String) -> String {
        var escaped = ""
        for character in text {
            switch character {
            case "\\": escaped += "\\e"
            case "-": escaped += "\\-"
            case "\n": escaped += " "
            default: escaped.append(character)
            }
        }
        if escaped.hasPrefix(".") || escaped.hasPrefix("'") { escaped = "\\&" + escaped }
        return escaped
    }
}
