// Writes the help, the usage lines and the usage-error text from the specs, so none of it can drift.

/// Renders `ToolSpec` and `CommandSpec` data as help text, 80 columns wide.
public enum HelpFormatter {
    /// The width help is wrapped to: fixed rather than the terminal's, so the text is the same everywhere (and
    /// in the snapshot tests).
    public static let width = 80

    /// The widest column where the descriptions of options, arguments and subcommands may start; a section whose
    /// labels are narrower starts them two spaces after its longest label.
    static let maximumDescriptionColumn = 28

    // MARK: Usage lines

    /// The words of a subcommand's synopsis after `bgtask NAME`: arguments, then options and flags, then the
    /// command line, if any (`APP [--json]`, `[--name NAME] ... -- CMD...`).
    public static func synopsisItems(of spec: CommandSpec) -> [String] {
        let plain = spec.arguments.filter { !$0.isCommand }.map { $0.isOptional ? "[\($0.name)]" : $0.name }
        let options = spec.options.map { "[\($0.longForm) \($0.valueName)]" }
        let flags = spec.flags.map { "[\($0.longForm)]" }
        let command = spec.commandArgument.map { ["--", $0.name + "..."] } ?? []
        return plain + options + flags + command
    }

    /// `bgtask run [--name NAME] ... -- CMD...`, wrapped under its first item when too long.
    public static func usage(of spec: CommandSpec, tool: ToolSpec) -> String {
        wrapSynopsis(lead: "\(tool.name) \(spec.name)", items: synopsisItems(of: spec), indent: "USAGE: ")
    }

    /// The tool's own usage: `bgtask [--socket PATH] [--user] SUBCOMMAND [ARGUMENTS...]`, or for a tool without
    /// subcommands its options alone.
    public static func toolUsage(_ tool: ToolSpec) -> String {
        let globals =
            tool.globalOptions.map { "[\($0.longForm) \($0.valueName)]" }
            + tool.globalFlags.map { "[\($0.longForm)]" }
        let rest = tool.commands.isEmpty ? ["[--version]", "[--help]"] : ["SUBCOMMAND", "[ARGUMENTS...]"]
        return wrapSynopsis(lead: tool.name, items: globals + rest, indent: "USAGE: ")
    }

    /// `indent` + `lead` + items separated by spaces, continuation lines aligned after the lead.
    static func wrapSynopsis(lead: String, items: [String], indent: String) -> String {
        let hanging = String(repeating: " ", count: indent.count + lead.count + 1)
        var lines: [String] = []
        var line = indent + lead
        for item in items {
            if line.count + 1 + item.count > width, line.count > hanging.count {
                lines.append(line)
                line = hanging + item
            } else {
                line += " " + item
            }
        }
        lines.append(line)
        return lines.joined(separator: "\n")
    }

    // MARK: Help

    /// The tool's help: what it is, how to call it, its global options, its subcommands and its environment.
    public static func toolHelp(_ tool: ToolSpec) -> String {
        let optionRows =
            tool.globalOptions.map(row) + tool.globalFlags.map(row)
            + [row(BuiltinFlags.version), row(BuiltinFlags.help)]
        let commandRows = tool.commands.map { ($0.name, $0.abstract + ".") }
        let environmentRows = tool.environment.map { ($0.name, $0.help) }
        let column = descriptionColumn(for: optionRows + commandRows + environmentRows)
        let sections = [
            overview(tool.abstract),
            toolUsage(tool),
            wrapParagraphs(tool.discussion),
            section("OPTIONS", rows: optionRows, descriptionColumn: column),
            commandRows.isEmpty
                ? ""
                : section("SUBCOMMANDS", rows: commandRows, descriptionColumn: column)
                    + "\n\n  See '\(tool.name) help SUBCOMMAND' for the arguments, options and examples of each.",
            section("ENVIRONMENT", rows: environmentRows, descriptionColumn: column),
        ]
        return sections.filter { !$0.isEmpty }.joined(separator: "\n\n") + "\n"
    }

    /// A subcommand's help: overview, usage, discussion, arguments, options, global options, examples.
    public static func help(of spec: CommandSpec, tool: ToolSpec) -> String {
        let argumentRows = spec.arguments.map(row)
        let optionRows = spec.options.map(row) + spec.flags.map(row) + [row(BuiltinFlags.help)]
        let globalRows = tool.globalOptions.map(row) + tool.globalFlags.map(row)
        let column = descriptionColumn(for: argumentRows + optionRows + globalRows)
        let sections = [
            overview(spec.abstract),
            usage(of: spec, tool: tool),
            wrapParagraphs(spec.discussion),
            section("ARGUMENTS", rows: argumentRows, descriptionColumn: column),
            section("OPTIONS", rows: optionRows, descriptionColumn: column),
            section("GLOBAL OPTIONS", rows: globalRows, descriptionColumn: column),
            examples(spec.examples),
        ]
        return sections.filter { !$0.isEmpty }.joined(separator: "\n\n") + "\n"
    }

    /// `OVERVIEW: abstract.`, wrapped under its first word.
    static func overview(_ abstract: String) -> String {
        let lead = "OVERVIEW: "
        let hanging = String(repeating: " ", count: lead.count)
        return wrap(abstract + ".", width: width - lead.count).enumerated()
            .map { ($0.offset == 0 ? lead : hanging) + $0.element }.joined(separator: "\n")
    }

    /// The text printed to standard error for a usage error: one line, then the usage and where to read more.
    public static func usageErrorText(_ error: UsageError, tool: ToolSpec) -> String {
        if let name = error.command, let spec = tool.command(named: name) {
            return "\(tool.name) \(name): error: \(error.message)\n\(usage(of: spec, tool: tool))\n"
                + "See '\(tool.name) help \(name)'.\n"
        }
        return "\(tool.name): error: \(error.message)\n\(toolUsage(tool))\nSee '\(tool.name) --help'.\n"
    }

    // MARK: Rows

    /// The label of an option as the help lists it: `-n, --limit N` or `--budget DURATION`.
    public static func label(_ option: OptionSpec) -> String {
        (option.shortName.map { "-\($0), " } ?? "") + option.longForm + " " + option.valueName
    }

    /// The label of a flag: `-a, --all`.
    public static func label(_ flag: FlagSpec) -> String {
        (flag.shortName.map { "-\($0), " } ?? "") + flag.longForm
    }

    /// The label of an argument: `APP`, `[APP]` or `CMD...`.
    public static func label(_ argument: ArgumentSpec) -> String {
        argument.isCommand ? argument.name + "..." : argument.isOptional ? "[\(argument.name)]" : argument.name
    }

    /// An option's description with its default: `Signal sent ... (default: TERM)`.
    public static func description(_ option: OptionSpec) -> String {
        option.help + (option.defaultValue.map { " (default: \($0))" } ?? "")
    }

    private static func row(_ option: OptionSpec) -> (String, String) { (label(option), description(option)) }
    private static func row(_ flag: FlagSpec) -> (String, String) { (label(flag), flag.help) }
    private static func row(_ argument: ArgumentSpec) -> (String, String) { (label(argument), argument.help) }

    /// The column where a page's descriptions start: two spaces after its longest label that fits under
    /// `maximumDescriptionColumn` (longer labels get a line of their own).
    static func descriptionColumn(for rows: [(String, String)]) -> Int {
        2 + (rows.map { $0.0.count }.filter { 2 + $0 + 2 <= maximumDescriptionColumn }.max() ?? 0) + 2
    }

    /// A titled list of label/description rows, descriptions at `descriptionColumn`; empty when there are no rows.
    static func section(_ title: String, rows: [(String, String)], descriptionColumn: Int) -> String {
        guard !rows.isEmpty else { return "" }
        let hanging = String(repeating: " ", count: descriptionColumn)
        var lines = [title + ":"]
        for (label, text) in rows {
            let wrapped = wrap(text, width: width - descriptionColumn)
            let head = "  " + label
            if head.count + 2 <= descriptionColumn {
                lines.append(head.padding(toLength: descriptionColumn) + (wrapped.first ?? ""))
            } else {
                // A label too long for its column gets a line of its own.
                lines.append(head)
                lines.append(hanging + (wrapped.first ?? ""))
            }
            lines += wrapped.dropFirst().map { hanging + $0 }
        }
        return lines.joined(separator: "\n")
    }

    private static func examples(_ examples: [ExampleSpec]) -> String {
        guard !examples.isEmpty else { return "" }
        var lines = ["EXAMPLES:"]
        for (index, example) in examples.enumerated() {
            if index > 0 { lines.append("") }
            lines.append("  $ " + example.commandLine)
            lines += wrap(example.explanation, width: width - 6).map { "      " + $0 }
        }
        return lines.joined(separator: "\n")
    }

    // MARK: Wrapping

    /// Paragraphs (separated by blank lines) wrapped to the full width.
    static func wrapParagraphs(_ text: String) -> String {
        paragraphs(text).map { wrap($0, width: width).joined(separator: "\n") }.joined(separator: "\n\n")
    }

    /// The paragraphs of a discussion, each with its lines joined.
    static func paragraphs(_ text: String) -> [String] {
        text.split(separator: "\n\n", omittingEmptySubsequences: false)
            .map { $0.split(whereSeparator: \.isNewline).joined(separator: " ") }
            .filter { !$0.isEmpty }
    }

    /// Words of `text` filled into lines of at most `width` characters; a longer word gets a line of its own.
    static func wrap(_ text: String, width: Int) -> [String] {
        var lines: [String] = []
        var line = ""
        for word in text.split(separator: " ", omittingEmptySubsequences: true) {
            if line.isEmpty {
                line = String(word)
            } else if line.count + 1 + word.count <= width {
                line += " " + word
            } else {
                lines.append(line)
                line = String(word)
            }
        }
        if !line.isEmpty { lines.append(line) }
        return lines
    }
}

extension String {
    /// The string padded with spaces to `length` characters (unchanged when already as long).
    public func padding(toLength length: Int) -> String {
        count >= length ? self : self + String(repeating: " ", count: length - count)
    }
}
