// The small file-system interface the loader reads through, with the real one and an in-memory one.

import Foundation

/// Why a file or directory that exists could not be read.
public struct FileSystemError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What went wrong.
    public enum Reason: Hashable, Sendable {
        /// The system refused or failed (permission, a directory where a file was expected, I/O); the
        /// associated text is the system's message.
        case unreadable(String)
        /// The bytes are not UTF-8: decoding with replacement characters would silently change values.
        case notUTF8
        /// The file is longer than the limit, in bytes: no configuration file is, and reading on would let
        /// a `--config /dev/zero` mistake eat the daemon's memory.
        case tooLarge(limitBytes: Int)
    }

    /// The path that could not be read.
    public var path: String
    /// Why.
    public var reason: Reason

    /// Creates an error.
    public init(path: String, reason: Reason) {
        self.path = path
        self.reason = reason
    }

    public var description: String {
        switch reason {
        case .unreadable(let message): return "cannot read \(path): \(message)"
        case .notUTF8: return "cannot read \(path): not valid UTF-8"
        case .tooLarge(let limit): return "cannot read \(path): larger than \(SystemdSyntax.formatSize(UInt64(limit)))"
        }
    }
}

/// What the loader needs from a file system: reading a text file and listing a directory, each telling
/// "nothing there" (nil) apart from "there but unreadable" (an error).
public protocol ConfigurationFileSystem: Sendable {
    /// The text of the file at `path`, or nil when nothing exists there.
    func contentsOfFile(atPath path: String) throws(FileSystemError) -> String?

    /// The names of the entries of the directory at `path`, in any order, or nil when nothing exists there.
    func namesInDirectory(atPath path: String) throws(FileSystemError) -> [String]?
}

/// The real file system, through Foundation.
public struct LocalFileSystem: ConfigurationFileSystem {
    /// The largest file read: 1 MiB, systemd's `LONG_LINE_MAX` for one line of a unit file.
    public static let maximumFileBytes = 1 << 20

    /// The real file system.
    public init() {}

    public func contentsOfFile(atPath path: String) throws(FileSystemError) -> String? {
        let data: Data
        do {
            let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: path))
            defer {
                // The descriptor was opened read-only: a close error cannot lose data, and there is no one to
                // tell but the log, which the read's own result already informs.
                try? handle.close()
            }
            data = try handle.read(upToCount: Self.maximumFileBytes + 1) ?? Data()
        } catch {
            if Self.isNoSuchFile(error) { return nil }
            throw FileSystemError(path: path, reason: .unreadable(Self.systemMessage(error)))
        }
        if data.count > Self.maximumFileBytes {
            throw FileSystemError(path: path, reason: .tooLarge(limitBytes: Self.maximumFileBytes))
        }
        guard let text = String(validating: data, as: UTF8.self) else {
            throw FileSystemError(path: path, reason: .notUTF8)
        }
        return text
    }

    public func namesInDirectory(atPath path: String) throws(FileSystemError) -> [String]? {
        do {
            return try FileManager.default.contentsOfDirectory(atPath: path)
        } catch {
            if Self.isNoSuchFile(error) { return nil }
            throw FileSystemError(path: path, reason: .unreadable(Self.systemMessage(error)))
        }
    }

    /// Whether Foundation's error is ENOENT, the one failure that means "not there".
    private static func isNoSuchFile(_ error: any Error) -> Bool {
        errno(of: error) == ENOENT
    }

    /// The system's own words ("Permission denied", "Is a directory") rather than Foundation's generic ones.
    private static func systemMessage(_ error: any Error) -> String {
        guard let code = errno(of: error) else { return (error as NSError).localizedDescription }
        return String(cString: strerror(code))
    }

    /// The errno under a Foundation error, where there is one. On Linux the underlying error is a Swift
    /// `POSIXError`, which only bridges to `NSError` through `any Error`.
    private static func errno(of error: any Error) -> Int32? {
        let nsError = error as NSError
        if nsError.domain == NSPOSIXErrorDomain { return Int32(nsError.code) }
        guard let underlying = nsError.userInfo[NSUnderlyingErrorKey] as? any Error else { return nil }
        let underlyingError = underlying as NSError
        guard underlyingError.domain == NSPOSIXErrorDomain else { return nil }
        return Int32(underlyingError.code)
    }
}

/// A file tree held in memory, for tests and for embedding a configuration: paths map to file contents,
/// directories exist implicitly as the parents of files, and chosen paths can be made unreadable.
public struct InMemoryFileSystem: ConfigurationFileSystem {
    /// File contents by absolute path.
    public var files: [String: String]
    /// Paths (files or directories) that exist but fail to read, with the message to fail with.
    public var unreadable: [String: String]

    /// Creates a tree of `files`, with `unreadable` paths failing to read.
    public init(files: [String: String] = [:], unreadable: [String: String] = [:]) {
        self.files = files
        self.unreadable = unreadable
    }

    public func contentsOfFile(atPath path: String) throws(FileSystemError) -> String? {
        if let message = unreadable[path] { throw FileSystemError(path: path, reason: .unreadable(message)) }
        if let text = files[path] { return text }
        if namesBelow(path) != nil { throw FileSystemError(path: path, reason: .unreadable("Is a directory")) }
        return nil
    }

    public func namesInDirectory(atPath path: String) throws(FileSystemError) -> [String]? {
        if let message = unreadable[path] { throw FileSystemError(path: path, reason: .unreadable(message)) }
        if files[path] != nil { throw FileSystemError(path: path, reason: .unreadable("Not a directory")) }
        return namesBelow(path)
    }

    /// The names directly below `path` (files and implicit directories), or nil if there are none.
    private func namesBelow(_ path: String) -> [String]? {
        let prefix = path.hasSuffix("/") ? path : path + "/"
        var names = Set<String>()
        for filePath in Array(files.keys) + Array(unreadable.keys) where filePath.hasPrefix(prefix) {
            if let name = filePath.dropFirst(prefix.count).split(separator: "/").first {
                names.insert(String(name))
            }
        }
        return names.isEmpty ? nil : Array(names)
    }
}
