// Finds and reads bgtaskd.conf, its drop-ins and the per-app overrides, in systemd's order, using only files that
// pass the trust rule.

/// Loads the configuration the way systemd loads a daemon's `*.conf`:
///
/// 1. the main file (`/etc/bgtaskd/bgtaskd.conf`, or the `--config PATH` given); a missing one means the
///    defaults, an unreadable one is an error;
/// 2. the drop-ins `PATH.d/*.conf` in lexicographic (byte) order of their names, hidden files skipped;
/// 3. the per-app overrides `apps.d/NAME.conf` beside the main file, which may hold only `[Policy]`, `[Access]` and
///    `[Launch]`, each merged over the default policy from 1 and 2.
///
/// Later assignments override earlier ones; `Key=` resets a key (in an app file: to the default policy).
///
/// Each file, and each of the two directories before it is listed, must first pass the trust rule
/// (`ConfigurationTrust`: owned by root or the daemon's user, not writable by group or others, and so every directory
/// up to the configuration root, or up to `/` past a symbolic link leading out of it). A file that fails is refused
/// whole, a directory that fails with everything in it; the result lists them (`refused`) with the rule each fails.
/// Loading never fails: every problem becomes a diagnostic or a refusal and the configuration keeps what it had.
public struct ConfigurationLoader: Sendable {
    /// The main file's location on a production system.
    public static let defaultPath = "/etc/bgtaskd/bgtaskd.conf"

    /// The main file.
    public var path: String
    /// The rule files must pass: the configuration root and the daemon's user.
    public var trust: ConfigurationTrust
    /// Where files are read from.
    public var fileSystem: any ConfigurationFileSystem

    /// A loader for the main file at `path`, reading through `fileSystem`, for a daemon running as `daemonUserID`
    /// (its effective uid). `root` is the configuration root, the directory above which nothing is checked: nil for
    /// the main file's directory, which it is for `/etc/bgtaskd/bgtaskd.conf`, `$XDG_CONFIG_HOME/bgtaskd/bgtaskd.conf`
    /// and `--config PATH` alike.
    public init(
        path: String = ConfigurationLoader.defaultPath, root: String? = nil, daemonUserID: UInt32,
        fileSystem: any ConfigurationFileSystem = LocalFileSystem()
    ) {
        self.path = path
        self.fileSystem = fileSystem
        let directory = Self.directory(of: path)
        trust = ConfigurationTrust(
            root: root ?? (directory.isEmpty ? "." : directory), daemonUserID: daemonUserID,
            workingDirectory: fileSystem.workingDirectory())
    }

    /// The drop-in directory: the main file's path with `.d` appended, as `bgtaskd.conf.d`.
    public var dropInDirectory: String { path + ".d" }

    /// The per-app directory: `apps.d` in the main file's directory.
    public var appsDirectory: String { Self.directory(of: path) + "apps.d" }

    /// Reads and applies every file the trust rule lets through, returning the configuration, the diagnostics and
    /// the files read and refused.
    public func load() -> ConfigurationLoadResult {
        var builder = ConfigurationBuilder(mainFile: path)
        var sources = ConfigurationSources(root: trust.root)
        if let file = read(path, into: &builder, &sources) {
            builder.applyMainFile(file)
            sources.read.append(path)
        }
        for name in confFiles(in: dropInDirectory, into: &builder, &sources) where !name.hasPrefix(".") {
            let filePath = Self.join(dropInDirectory, name)
            if let file = read(filePath, into: &builder, &sources) {
                builder.applyMainFile(file)
                sources.read.append(filePath)
            }
        }
        for name in confFiles(in: appsDirectory, into: &builder, &sources) {
            let filePath = Self.join(appsDirectory, name)
            let appName = String(name.dropLast(Self.confSuffix.count))
            do throws(AppNameError) {
                try Self.validateAppName(appName)
            } catch {
                builder.report(.error, file: filePath, "\(error); ignoring the file")
                continue
            }
            if let file = read(filePath, into: &builder, &sources) {
                builder.addAppFile(file, appName: appName)
                sources.read.append(filePath)
            }
        }
        return builder.finish(sources: sources)
    }

    /// Checks that `name` (an `apps.d` file name without `.conf`) can name an app: not empty, no `/`,
    /// no leading `.`, no control characters.
    public static func validateAppName(_ name: String) throws(AppNameError) {
        if name.isEmpty { throw .empty }
        if name.unicodeScalars.contains("/") { throw .containsSlash(name) }
        if name.unicodeScalars.first == "." { throw .startsWithDot(name) }
        if name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
            throw .containsControlCharacter(name)
        }
    }

    static let confSuffix = ".conf"

    /// Parses the file at `path` when the trust rule lets it through; nil when it is missing (silently), refused
    /// (recorded in `sources`) or unreadable (reported).
    private func read(
        _ path: String, into builder: inout ConfigurationBuilder, _ sources: inout ConfigurationSources
    ) -> INIFile? {
        let resolved: String
        let checked: FileStatus
        switch trust.evaluate(path) { fileSystem.lookUp($0) } {
        case .missing:
            return nil
        case .refused(let refusal):
            sources.refused.append(RefusedConfiguration(path: path, refusal: refusal, isDirectory: false))
            return nil
        case .trusted(let trustedPath, let status):
            resolved = trustedPath
            checked = status
        }
        do throws(FileSystemError) {
            // The file read is the file checked: opened without following a link, judged by its descriptor.
            let outcome = try fileSystem.readFile(atPath: resolved) { opened in
                trust.problem(opened: opened, checked: checked, expecting: .regularFile) == nil
            }
            switch outcome {
            case nil:
                return nil
            case .declined(let opened):
                let problem =
                    trust.problem(opened: opened, checked: checked, expecting: .regularFile) ?? .replaced
                let refusal = TrustRefusal(
                    problem: problem, culprit: resolved, isSubject: true, daemonUserID: trust.daemonUserID)
                sources.refused.append(RefusedConfiguration(path: path, refusal: refusal, isDirectory: false))
                return nil
            case .read(_, let text):
                return INIFile(parsing: text, fileName: path)
            }
        } catch {
            builder.report(.error, file: path, "\(error); ignoring the file")
            return nil
        }
    }

    /// The names ending in `.conf` in `directory`, sorted byte-wise as systemd sorts drop-ins; empty when the
    /// directory is missing or refused (recorded in `sources`), and reported when it is unreadable.
    private func confFiles(
        in directory: String, into builder: inout ConfigurationBuilder, _ sources: inout ConfigurationSources
    ) -> [String] {
        let resolved: String
        switch trust.evaluate(directory, expecting: .directory) { fileSystem.lookUp($0) } {
        case .missing:
            return []
        case .refused(let refusal):
            sources.refused.append(RefusedConfiguration(path: directory, refusal: refusal, isDirectory: true))
            return []
        case .trusted(let trustedPath, _):
            resolved = trustedPath
        }
        do throws(FileSystemError) {
            // Listed where it really is; each file is then judged again by its own path.
            let names = try fileSystem.namesInDirectory(atPath: resolved) ?? []
            return names.filter { $0.hasSuffix(Self.confSuffix) }
                .sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        } catch {
            builder.report(.error, file: directory, "\(error); ignoring the directory")
            return []
        }
    }

    /// The directory part of `path` with its trailing `/` (`/etc/bgtaskd/`), or "" for a bare file name.
    static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "" }
        return String(path[...slash])
    }

    static func join(_ directory: String, _ name: String) -> String {
        directory.hasSuffix("/") ? directory + name : directory + "/" + name
    }
}
