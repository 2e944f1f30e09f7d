// The module table of docs/ARCHITECTURE.md, the package graph and the sources' imports must tell the same story.

import BGTaskTestSupport
import Foundation
import Testing

/// One target of the package, as `swift package dump-package` describes it.
struct PackageTarget {
    var name: String
    /// `regular`, `executable`, `test`, `system` or `plugin`.
    var type: String
    /// The directory of its sources, relative to the package root.
    var path: String
    var dependencies: Set<String>
}

/// One row of the module table in docs/ARCHITECTURE.md.
struct DocumentedModule {
    var name: String
    var purpose: String
    var mayImport: Set<String>
}

@Suite("Module graph")
struct ModuleGraphTests {
    /// The package's targets, from the manifest as SwiftPM reads it (with a scratch path of its own, so it does not
    /// wait for the lock of the build directory this test runs from).
    static func packageTargets() throws -> [PackageTarget] {
        let scratch = try ScratchDirectory(prefix: "dump-package")
        let dump = try runToCompletion(
            [
                "swift", "package", "--package-path", Products.packageRoot, "--scratch-path", scratch.path,
                "dump-package",
            ])
        guard let root = try JSONSerialization.jsonObject(with: Data(dump.utf8)) as? [String: Any],
            let targets = root["targets"] as? [[String: Any]]
        else { throw HarnessError("dump-package printed no targets") }
        return try targets.map { target in
            guard let name = target["name"] as? String, let type = target["type"] as? String else {
                throw HarnessError("a target without name or type: \(target)")
            }
            var dependencies: Set<String> = []
            for dependency in target["dependencies"] as? [[String: Any]] ?? [] {
                // {"byName": ["X", null]}, {"target": ["X", null]} or {"product": ["X", "package", ...]}.
                for value in dependency.values {
                    if let parts = value as? [Any], let dependencyName = parts.first as? String {
                        dependencies.insert(dependencyName)
                    }
                }
            }
            let defaultPath = (type == "test" ? "Tests/" : type == "plugin" ? "Plugins/" : "Sources/") + name
            return PackageTarget(
                name: name, type: type, path: target["path"] as? String ?? defaultPath, dependencies: dependencies)
        }
    }

    /// Runs `arguments` and returns its standard output; fails with its standard error when it fails.
    static func runToCompletion(_ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let outputData = output.fileHandleForReading.readDataToEndOfFile()
        let errorData = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw HarnessError(
                "\(arguments.joined(separator: " ")) failed: \(String(decoding: errorData, as: UTF8.self))")
        }
        return String(decoding: outputData, as: UTF8.self)
    }

    /// The rows of the module table: lines `| \`Name\` | kind | purpose | may import |`.
    static func documentedModules() throws -> [DocumentedModule] {
        let text = try String(contentsOfFile: Products.packageRoot + "/docs/ARCHITECTURE.md", encoding: .utf8)
        return text.split(separator: "\n").compactMap { line -> DocumentedModule? in
            guard line.hasPrefix("| `") else { return nil }
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map {
                $0.trimmingCharacters(in: .whitespaces)
            }
            guard cells.count == 6 else { return nil }
            return DocumentedModule(
                name: cells[1].trimmingCharacters(in: CharacterSet(charactersIn: "`")), purpose: cells[3],
                mayImport: Set(backticked(cells[4])))
        }
    }

    /// The `code` spans of a table cell.
    static func backticked(_ cell: String) -> [String] {
        cell.split(separator: "`", omittingEmptySubsequences: false).enumerated().compactMap { index, part in
            index % 2 == 1 ? String(part) : nil
        }
    }

    /// The package modules imported by the Swift files under `path` (any `import`, `@testable` or `@_exported`).
    static func importedModules(under path: String, among modules: Set<String>) throws -> [String: Set<String>] {
        var imports: [String: Set<String>] = [:]
        let root = Products.packageRoot + "/" + path
        guard let files = FileManager.default.enumerator(atPath: root) else { return [:] }
        for case let file as String in files where file.hasSuffix(".swift") {
            let text = try String(contentsOfFile: root + "/" + file, encoding: .utf8)
            for line in text.split(separator: "\n") {
                var words = line.split(separator: " ").map(String.init)[...]
                while let first = words.first, first.hasPrefix("@") { words.removeFirst() }
                guard words.first == "import", words.count >= 2 else { continue }
                // `import struct Module.Symbol` names its module after the kind.
                let target = words.count >= 3 ? words[words.startIndex + 2] : words[words.startIndex + 1]
                let module = String(target.split(separator: ".").first ?? "")
                if modules.contains(module) { imports[path + "/" + file, default: []].insert(module) }
            }
        }
        return imports
    }

    @Test("the module table lists exactly the package's modules, each with one purpose and the imports it declares")
    func tableMatchesPackage() throws {
        let targets = try Self.packageTargets().filter { $0.type != "test" }
        let documented = try Self.documentedModules()
        #expect(documented.count == Set(documented.map(\.name)).count, "a module listed twice")
        let byName = Dictionary(uniqueKeysWithValues: documented.map { ($0.name, $0) })
        let onlyInTable = Set(byName.keys).subtracting(targets.map(\.name)).sorted()
        let onlyInPackage = Set(targets.map(\.name)).subtracting(byName.keys).sorted()
        #expect(
            onlyInTable.isEmpty && onlyInPackage.isEmpty,
            "only in the table: \(onlyInTable); only in Package.swift: \(onlyInPackage)")
        for target in targets {
            guard let row = byName[target.name] else { continue }
            #expect(!row.purpose.isEmpty, "\(target.name) has no purpose")
            #expect(
                row.mayImport == target.dependencies,
                "\(target.name): the table says \(row.mayImport.sorted()), Package.swift \(target.dependencies.sorted())"
            )
        }
    }

    @Test("README.md's module table names exactly the package's modules under Sources/ and its plugin, each once")
    func readmeTableMatchesPackage() throws {
        let modules = Set(
            try Self.packageTargets().filter { $0.path.hasPrefix("Sources/") || $0.type == "plugin" }.map(\.name))
        let text = try String(contentsOfFile: Products.packageRoot + "/README.md", encoding: .utf8)
        // The rows of the table whose header is `| module | role |`: one or more modules in the first cell.
        let rows = text.split(separator: "\n", omittingEmptySubsequences: false)
            .drop { $0 != "| module | role |" }.dropFirst(2).prefix { $0.hasPrefix("| ") }
        #expect(!rows.isEmpty, "README.md has no `| module | role |` table")
        let named = rows.flatMap { row in
            Self.backticked(String(row.split(separator: "|", omittingEmptySubsequences: false)[1]))
        }
        #expect(named.count == Set(named).count, "a module listed twice: \(named)")
        let onlyInReadme = Set(named).subtracting(modules).sorted()
        let onlyInPackage = modules.subtracting(named).sorted()
        #expect(
            onlyInReadme.isEmpty && onlyInPackage.isEmpty,
            "only in README.md: \(onlyInReadme); only in Package.swift: \(onlyInPackage)")
    }

    @Test("the daemon imports no Foundation and links none; the client library imports FoundationEssentials at most")
    func noFullFoundation() throws {
        // Foundation costs a process about 6 MiB of RSS (ICU and the internationalization tables) and
        // FoundationEssentials about 3.5 MiB more than the standard library: the daemon (everything bgtaskd loads)
        // uses neither, and an app linking BGTaskClient gets FoundationEssentials at most.
        let foundations: Set<String> = ["Foundation", "FoundationEssentials", "FoundationNetworking", "FoundationXML"]
        let daemon = [
            "BGTaskVocabulary", "BGTaskCore", "BGTaskPOSIX", "BGTaskSystem", "BGTaskConfig", "BGTaskArguments",
            "BGTaskJSON", "BGTaskProtocol", "BGTaskDaemon", "bgtaskd",
        ]
        var offenders: [String] = []
        for module in daemon {
            offenders += try Self.importedModules(under: "Sources/" + module, among: foundations).keys.sorted()
        }
        offenders += try Self.importedModules(
            under: "Sources/BGTaskClient", among: foundations.subtracting(["FoundationEssentials"])
        )
        .keys.sorted()
        #expect(offenders.isEmpty, "these import more Foundation than they may: \(offenders)")
        let binary = try Products.path("bgtaskd")
        let dynamic = try ChildProcess(["readelf", "-d", binary])
        var needed: [String] = []
        while let line = try dynamic.nextLine(timeout: .seconds(30)) {
            if line.contains("(NEEDED)") { needed.append(line) }
        }
        #expect(try dynamic.waitForExit() == .exited(0))
        #expect(needed.contains { $0.contains("libc.so") }, "readelf -d \(binary) listed no libc: \(needed)")
        #expect(!needed.contains { $0.contains("Foundation") }, "bgtaskd links Foundation: \(needed)")
    }

    @Test("no library or executable depends on an executable (tests may: they run the binaries)")
    func nothingDependsOnAnExecutable() throws {
        let targets = try Self.packageTargets()
        let executables = Set(targets.filter { $0.type == "executable" }.map(\.name))
        #expect(!executables.isEmpty)
        for target in targets where target.type == "regular" || target.type == "executable" {
            let offending = target.dependencies.intersection(executables)
            #expect(offending.isEmpty, "\(target.name) depends on the executable(s) \(offending.sorted())")
        }
    }

    @Test("every source file imports only modules its target declares")
    func importsAreDeclared() throws {
        let targets = try Self.packageTargets().filter { $0.type != "plugin" && $0.type != "system" }
        let modules = Set(try Self.packageTargets().map(\.name))
        var checkedFiles = 0
        for target in targets {
            for (file, imported) in try Self.importedModules(under: target.path, among: modules) {
                checkedFiles += 1
                let undeclared = imported.subtracting(target.dependencies).subtracting([target.name])
                #expect(
                    undeclared.isEmpty, "\(file) imports \(undeclared.sorted()), which \(target.name) does not declare")
            }
        }
        #expect(checkedFiles > 100, "only \(checkedFiles) files with package imports: the walk found too little")
    }
}
