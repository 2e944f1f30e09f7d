// A parser of the Varlink interface definition language, keeping the doc comment of every member and field.
//
// The build plugin generates the Swift wire types from its model; the tests check the interface against the
// daemon with it, and docs/PROTOCOL.md is generated from it. It follows the grammar of varlink.org: `interface`
// NAME, then `type`, `method` and `error` members; `#` starts a comment running to the end of the line. A block of
// comment lines directly above a member or field (no blank line between) is its documentation; other comments are
// ignored.

/// A type expression of the IDL.
public indirect enum VarlinkType: Hashable, Sendable, CustomStringConvertible {
    /// `bool`.
    case bool
    /// `int`: a JSON number with no fraction.
    case int
    /// `float`: any JSON number.
    case float
    /// `string`.
    case string
    /// `object`: any JSON object.
    case object
    /// A type declared with `type` in the interface.
    case named(String)
    /// `?T`: the value may be null or absent.
    case optional(VarlinkType)
    /// `[]T`: an array.
    case array(VarlinkType)
    /// `[string]T`: an object mapping strings to `T`.
    case dictionary(VarlinkType)
    /// `(name: T, ...)`: an object with these fields.
    case structure([VarlinkField])
    /// `(a, b, ...)`: one of these strings.
    case enumeration([String])

    /// The type as the IDL spells it, on one line.
    public var description: String {
        switch self {
        case .bool: "bool"
        case .int: "int"
        case .float: "float"
        case .string: "string"
        case .object: "object"
        case .named(let name): name
        case .optional(let wrapped): "?" + wrapped.description
        case .array(let element): "[]" + element.description
        case .dictionary(let value): "[string]" + value.description
        case .structure(let fields): "(" + fields.map { "\($0.name): \($0.type)" }.joined(separator: ", ") + ")"
        case .enumeration(let names): "(" + names.joined(separator: ", ") + ")"
        }
    }

    /// The names of declared types this type refers to, outermost first.
    public var referencedTypeNames: [String] {
        switch self {
        case .bool, .int, .float, .string, .object, .enumeration: []
        case .named(let name): [name]
        case .optional(let inner), .array(let inner), .dictionary(let inner): inner.referencedTypeNames
        case .structure(let fields): fields.flatMap(\.type.referencedTypeNames)
        }
    }
}

/// A field of a struct, a method's parameters or reply, or an error.
public struct VarlinkField: Hashable, Sendable {
    /// The field's name.
    public var name: String
    /// The field's type.
    public var type: VarlinkType
    /// The comment block directly above the field, without the `#` marks; empty when there is none.
    public var documentation: String

    /// A field.
    public init(name: String, type: VarlinkType, documentation: String = "") {
        self.name = name
        self.type = type
        self.documentation = documentation
    }
}

/// A `type` member.
public struct VarlinkTypeDefinition: Hashable, Sendable {
    /// The type's name.
    public var name: String
    /// What it stands for: a structure or an enumeration.
    public var type: VarlinkType
    /// The comment block directly above the member.
    public var documentation: String
}

/// A `method` member.
public struct VarlinkMethodDefinition: Hashable, Sendable {
    /// The method's name within the interface.
    public var name: String
    /// The parameters, in declaration order.
    public var parameters: [VarlinkField]
    /// The reply's fields, in declaration order.
    public var reply: [VarlinkField]
    /// The comment block directly above the member.
    public var documentation: String
}

/// An `error` member.
public struct VarlinkErrorDefinition: Hashable, Sendable {
    /// The error's name within the interface.
    public var name: String
    /// The error's parameters, in declaration order.
    public var parameters: [VarlinkField]
    /// The comment block directly above the member.
    public var documentation: String
}

/// A syntax or consistency error in an interface definition, with the position it was found at.
public struct VarlinkIDLError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The 1-based line.
    public var line: Int
    /// The 1-based column, in Unicode scalars.
    public var column: Int
    /// What is wrong.
    public var message: String

    public var description: String { "line \(line), column \(column): \(message)" }
}

/// A parsed interface definition.
public struct VarlinkInterfaceDefinition: Hashable, Sendable {
    /// The interface name, such as `io.bgtask.Lifecycle`.
    public var name: String
    /// The comment block directly above the `interface` line.
    public var documentation: String
    /// The `type` members, in declaration order.
    public var types: [VarlinkTypeDefinition]
    /// The `method` members, in declaration order.
    public var methods: [VarlinkMethodDefinition]
    /// The `error` members, in declaration order.
    public var errors: [VarlinkErrorDefinition]

    /// An interface from its parts, as the parser builds it.
    public init(
        name: String,
        documentation: String,
        types: [VarlinkTypeDefinition],
        methods: [VarlinkMethodDefinition],
        errors: [VarlinkErrorDefinition]
    ) {
        self.name = name
        self.documentation = documentation
        self.types = types
        self.methods = methods
        self.errors = errors
    }

    /// Parses `text`, then checks that member names are unique, field names are unique within each struct and
    /// every referenced type is declared. Nesting deeper than `maximumNestingDepth` is refused.
    public init(parsing text: String) throws(VarlinkIDLError) {
        var parser = IDLParser(text: text)
        self = try parser.parseInterface()
    }

    /// The deepest nesting of type expressions accepted (`?`, `[]`, `[string]` and inline structs each count).
    /// Real interfaces nest two or three levels; the bound keeps hostile input from recursing without limit.
    public static let maximumNestingDepth = 32

    /// The type member named `name`.
    public func type(named name: String) -> VarlinkTypeDefinition? { types.first { $0.name == name } }

    /// The method member named `name`.
    public func method(named name: String) -> VarlinkMethodDefinition? { methods.first { $0.name == name } }

    /// The error member named `name`.
    public func error(named name: String) -> VarlinkErrorDefinition? { errors.first { $0.name == name } }
}

/// One lexical token with its position and the documentation block directly above it.
private struct Token {
    enum Kind: Equatable {
        /// A run of letters, digits, `_`, `.` and `-`: keywords, names, interface names.
        case word(String)
        /// One of `( ) , : ? [ ]`.
        case punctuation(Character)
        /// `->`.
        case arrow
        /// The end of the text.
        case end
    }

    var kind: Kind
    var line: Int
    var column: Int
    var documentation: String
}

/// Splits the text into tokens, collecting comment blocks as documentation of the token that follows them.
private struct IDLLexer {
    private let scalars: [Unicode.Scalar]
    private var index = 0
    private var line = 1
    private var column = 1

    init(text: String) {
        scalars = Array(text.unicodeScalars)
    }

    mutating func tokenize() throws(VarlinkIDLError) -> [Token] {
        var tokens: [Token] = []
        // The comment block being collected, and the line of its last comment; reset by a blank line or code.
        var block: [String] = []
        var blockEndLine = 0
        var lineHasCode = false
        while true {
            guard index < scalars.count else {
                tokens.append(Token(kind: .end, line: line, column: column, documentation: ""))
                return tokens
            }
            let scalar = scalars[index]
            switch scalar {
            case "\n":
                advance()
                lineHasCode = false
            case " ", "\t", "\r":
                advance()
            case "#":
                let commentLine = line
                let startsLine = !lineHasCode
                advance()
                var text = ""
                while index < scalars.count, scalars[index] != "\n" {
                    text.unicodeScalars.append(scalars[index])
                    advance()
                }
                // A trailing comment after code documents nothing; a comment line extends the block only when
                // it directly follows the block's last line.
                guard startsLine else { break }
                if blockEndLine != commentLine - 1 { block = [] }
                // One leading space is the comment's margin. Compared as a scalar: a space followed by a
                // combining mark is one Character, which is not " ", and the margin would be kept.
                block.append(text.unicodeScalars.first == " " ? String(text.unicodeScalars.dropFirst()) : text)
                blockEndLine = commentLine
            default:
                let documentation = blockEndLine == line - 1 && !lineHasCode ? block.joined(separator: "\n") : ""
                block = []
                blockEndLine = 0
                lineHasCode = true
                tokens.append(try token(documentation: documentation))
            }
        }
    }

    private mutating func token(documentation: String) throws(VarlinkIDLError) -> Token {
        let startLine = line
        let startColumn = column
        let scalar = scalars[index]
        let kind: Token.Kind
        switch scalar {
        case "(", ")", ",", ":", "?", "[", "]":
            advance()
            kind = .punctuation(Character(scalar))
        case "-" where index + 1 < scalars.count && scalars[index + 1] == ">":
            advance()
            advance()
            kind = .arrow
        case _ where IDLLexer.isWordScalar(scalar):
            var word = ""
            while index < scalars.count, IDLLexer.isWordScalar(scalars[index]) {
                // "->" ends a word: `Method()->(...)` has no space before the arrow in some interfaces.
                if scalars[index] == "-", index + 1 < scalars.count, scalars[index + 1] == ">" { break }
                word.unicodeScalars.append(scalars[index])
                advance()
            }
            kind = .word(word)
        default:
            throw VarlinkIDLError(
                line: startLine, column: startColumn, message: "unexpected character \(scalar.escaped(asASCII: true))"
            )
        }
        return Token(kind: kind, line: startLine, column: startColumn, documentation: documentation)
    }

    private static func isWordScalar(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar {
        case "a"..."z", "A"..."Z", "0"..."9", "_", ".", "-": true
        default: false
        }
    }

    private mutating func advance() {
        if scalars[index] == "\n" {
            line += 1
            column = 1
        } else {
            column += 1
        }
        index += 1
    }
}

/// Recursive-descent parser over the tokens; recursion is bounded by `maximumNestingDepth`.
private struct IDLParser {
    private let text: String
    private var tokens: [Token] = []
    private var position = 0
    /// Every use of a declared type's name, with where it was used, checked once all members are known.
    private var references: [(name: String, token: Token)] = []

    init(text: String) {
        self.text = text
    }

    mutating func parseInterface() throws(VarlinkIDLError) -> VarlinkInterfaceDefinition {
        var lexer = IDLLexer(text: text)
        tokens = try lexer.tokenize()
        let keyword = current
        try expectWord("interface")
        let nameToken = current
        let name = try word(what: "an interface name")
        guard VarlinkNames.isValidInterfaceName(name.utf8) else {
            throw error(at: nameToken, "\(name.debugDescription) is not a valid interface name")
        }
        var definition = VarlinkInterfaceDefinition(
            name: name, documentation: keyword.documentation, types: [], methods: [], errors: []
        )
        var memberNames: Set<String> = []
        while current.kind != .end {
            let start = current
            let keyword = try word(what: "'type', 'method' or 'error'")
            let memberToken = current
            let memberName = try word(what: "a member name")
            guard VarlinkNames.isValidMemberName(memberName.utf8) else {
                throw error(at: memberToken, "\(memberName.debugDescription) is not a valid member name")
            }
            guard memberNames.insert(memberName).inserted else {
                throw error(at: memberToken, "\(memberName) is declared twice")
            }
            switch keyword {
            case "type":
                let type = try parseType(depth: 0)
                switch type {
                case .structure, .enumeration: break
                default: throw error(at: memberToken, "type \(memberName) must be a struct or an enum")
                }
                definition.types.append(
                    VarlinkTypeDefinition(name: memberName, type: type, documentation: start.documentation)
                )
            case "method":
                let parameters = try parseStruct(depth: 0)
                try expect(.arrow, what: "'->'")
                let reply = try parseStruct(depth: 0)
                definition.methods.append(
                    VarlinkMethodDefinition(
                        name: memberName, parameters: parameters, reply: reply, documentation: start.documentation
                    )
                )
            case "error":
                let parameters = try parseStruct(depth: 0)
                definition.errors.append(
                    VarlinkErrorDefinition(name: memberName, parameters: parameters, documentation: start.documentation)
                )
            default:
                throw error(at: start, "expected 'type', 'method' or 'error', found \(keyword.debugDescription)")
            }
        }
        guard !memberNames.isEmpty else { throw error(at: current, "the interface declares no member") }
        // Every named type used anywhere must be declared with `type`, before or after its use.
        let declared = Set(definition.types.map(\.name))
        if let missing = references.first(where: { !declared.contains($0.name) }) {
            throw error(at: missing.token, "type \(missing.name) is used but not declared")
        }
        return definition
    }

    /// `( name: T, ... )` of a method or error; an enum is refused there.
    private mutating func parseStruct(depth: Int) throws(VarlinkIDLError) -> [VarlinkField] {
        let start = current
        guard case .structure(let fields) = try parseParenthesized(depth: depth) else {
            throw error(at: start, "expected a struct of 'name: type' fields")
        }
        return fields
    }

    private mutating func parseType(depth: Int) throws(VarlinkIDLError) -> VarlinkType {
        let start = current
        guard depth < VarlinkInterfaceDefinition.maximumNestingDepth else {
            throw error(at: start, "types nested deeper than \(VarlinkInterfaceDefinition.maximumNestingDepth)")
        }
        switch start.kind {
        case .punctuation("?"):
            position += 1
            if current.kind == .punctuation("?") { throw error(at: current, "'??' is not a type") }
            return .optional(try parseType(depth: depth + 1))
        case .punctuation("["):
            position += 1
            if current.kind == .punctuation("]") {
                position += 1
                return .array(try parseType(depth: depth + 1))
            }
            try expectWord("string")
            try expect(.punctuation("]"), what: "']'")
            return .dictionary(try parseType(depth: depth + 1))
        case .punctuation("("):
            return try parseParenthesized(depth: depth + 1)
        case .word(let word):
            position += 1
            switch word {
            case "bool": return .bool
            case "int": return .int
            case "float": return .float
            case "string": return .string
            case "object": return .object
            default:
                guard VarlinkNames.isValidMemberName(word.utf8) else {
                    throw error(at: start, "\(word.debugDescription) is not a type")
                }
                references.append((word, start))
                return .named(word)
            }
        default:
            throw error(at: start, "expected a type")
        }
    }

    /// `( ... )`: a struct when the first entry has a `:`, an enum otherwise; `()` is an empty struct.
    private mutating func parseParenthesized(depth: Int) throws(VarlinkIDLError) -> VarlinkType {
        try expect(.punctuation("("), what: "'('")
        if current.kind == .punctuation(")") {
            position += 1
            return .structure([])
        }
        var fields: [VarlinkField] = []
        var enumNames: [String] = []
        var isEnum: Bool?
        var seen: Set<String> = []
        while true {
            let fieldToken = current
            let name = try word(what: "a field name")
            guard IDLParser.isValidFieldName(name) else {
                throw error(at: fieldToken, "\(name.debugDescription) is not a valid field name")
            }
            guard seen.insert(name).inserted else { throw error(at: fieldToken, "field \(name) appears twice") }
            let hasType = current.kind == .punctuation(":")
            if isEnum == nil { isEnum = !hasType }
            if hasType {
                guard isEnum == false else { throw error(at: current, "an enum's values take no type") }
                position += 1
                fields.append(
                    VarlinkField(name: name, type: try parseType(depth: depth), documentation: fieldToken.documentation)
                )
            } else {
                guard isEnum == true else { throw error(at: current, "expected ':' after field \(name)") }
                enumNames.append(name)
            }
            if current.kind == .punctuation(",") {
                position += 1
                continue
            }
            try expect(.punctuation(")"), what: "',' or ')'")
            return isEnum == true ? .enumeration(enumNames) : .structure(fields)
        }
    }

    /// `[A-Za-z]([_]?[A-Za-z0-9])*`, the grammar's field name.
    private static func isValidFieldName(_ name: String) -> Bool {
        var previousIsUnderscore = true
        for (offset, scalar) in name.unicodeScalars.enumerated() {
            switch scalar {
            case "a"..."z", "A"..."Z":
                previousIsUnderscore = false
            case "0"..."9" where offset > 0:
                previousIsUnderscore = false
            case "_" where !previousIsUnderscore:
                previousIsUnderscore = true
            default:
                return false
            }
        }
        return !name.isEmpty && !previousIsUnderscore
    }

    private var current: Token { tokens[min(position, tokens.count - 1)] }

    private mutating func word(what: String) throws(VarlinkIDLError) -> String {
        guard case .word(let word) = current.kind else { throw error(at: current, "expected \(what)") }
        position += 1
        return word
    }

    private mutating func expectWord(_ expected: String) throws(VarlinkIDLError) {
        guard current.kind == .word(expected) else { throw error(at: current, "expected '\(expected)'") }
        position += 1
    }

    private mutating func expect(_ kind: Token.Kind, what: String) throws(VarlinkIDLError) {
        guard current.kind == kind else { throw error(at: current, "expected \(what)") }
        position += 1
    }

    private func error(at token: Token, _ message: String) -> VarlinkIDLError {
        VarlinkIDLError(line: token.line, column: token.column, message: message)
    }
}
