// Finds and reads bgtaskd.conf, its drop-ins and the per-app overrides, in systemd's order.

/// Loads the configuration the way systemd loads a daemon's `*.conf`:
///
/// 1. the main file (`/etc/bgtaskd/bgtaskd.conf`, or the `--config PATH` given); a missing one means the
///    defaults, an unreadable one is an error;
/// 2. the drop-ins `PATH.d/*.conf` in lexicographic (byte) order of their names, hidden files skipped;
/// 3. the per-app overrides `apps.d/NAME.conf` beside the main file, which may hold only `[Policy]` and `[Access]`,
///    each merged over the default policy from 1 and 2.
///
/// Later assignments override earlier ones; `Key=` resets a key (in an app file: to the default policy).
/// Loading never fails: every problem becomes a diagnostic and the configuration keeps what it had.
public struct ConfigurationLoader: Sendable {
    /// The main file's location on a production system.
    public static let defaultPath = "/etc/bgtaskd/bgtaskd.conf"

    /// The main file.
    public var path: String
    /// Where files are read from.
    public var fileSystem: any ConfigurationFileSystem

    /// A loader for the main file at `path`, reading through `fileSystem`.
    public init(
        path: String = ConfigurationLoader.defaultPath, fileSystem: any ConfigurationFileSystem = LocalFileSystem()
    ) {
        self.path = path
        self.fileSystem = fileSystem
    }

    /// The drop-in directory: the main file's path with `.d` appended, as `bgtaskd.conf.d`.
    public var dropInDirectory: String { path + ".d" }

    /// The per-app directory: `apps.d` in the main file's directory.
    public var appsDirectory: String { Self.directory(of: path) + "apps.d" }

    /// Reads and applies every file, returning the configuration and the diagnostics.
    public func load() -> ConfigurationLoadResult {
        var builder = ConfigurationBuilder(mainFile: path)
        var filesRead: [String] = []
        if let file = read(path, into: &builder) {
            builder.applyMainFile(file)
            filesRead.append(path)
        }
        for name in confFiles(in: dropInDirectory, into: &builder) where !name.hasPrefix(".") {
            let filePath = Self.join(dropInDirectory, name)
            if let file = read(filePath, into: &builder) {
                builder.applyMainFile(file)
                filesRead.append(filePath)
            }
        }
        for name in confFiles(in: appsDirectory, into: &builder) {
            let filePath = Self.join(appsDirectory, name)
            let appName = String(name.dropLast(Self.confSuffix.count))
            do throws(AppNameError) {
                try Self.validateAppName(appName)
            } catch {
                builder.report(.error, file: filePath, "\(error); ignoring the file")
                continue
            }
            if let file = read(filePath, into: &builder) {
                builder.addAppFile(file, appName: appName)
                filesRead.append(filePath)
            }
        }
        return builder.finish(filesRead: filesRead)
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

    /// Parses the file at `path`, or returns nil when it is missing (silently) or unreadable (reported).
    private func read(_ path: String, into builder: inout ConfigurationBuilder) -> INIFile? {
        do throws(FileSystemError) {
            guard let text = try fileSystem.contentsOfFile(atPath: path) else { return nil }
            return INIFile(parsing: text, fileName: path)
        } catch {
            builder.report(.error, file: path, "\(error); ignoring the file")
            return nil
        }
    }

    /// The names ending in `.conf` in `directory`, sorted byte-wise as systemd sorts drop-ins; empty when
    /// the directory is missing, and reported when it is unreadable.
    private func confFiles(in directory: String, into builder: inout ConfigurationBuilder) -> [String] {
        do throws(FileSystemError) {
            let names = try fileSystem.namesInDirectory(atPath: directory) ?? []
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
