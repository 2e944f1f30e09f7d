// The small file-system interface the loader reads through, with the real one and an in-memory one.

import Glibc

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

/// The real file system, through the C library.
public struct LocalFileSystem: ConfigurationFileSystem {
    /// The largest file read: 1 MiB, systemd's `LONG_LINE_MAX` for one line of a unit file.
    public static let maximumFileBytes = 1 << 20

    /// The real file system.
    public init() {}

    public func contentsOfFile(atPath path: String) throws(FileSystemError) -> String? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            let code = errno
            if code == ENOENT { return nil }
            throw FileSystemError(path: path, reason: .unreadable(Self.message(code)))
        }
        // Opened read-only: a close error cannot lose data.
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while bytes.count <= Self.maximumFileBytes {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw FileSystemError(path: path, reason: .unreadable(Self.message(errno)))
            }
            if count == 0 { break }
            bytes += chunk[..<count]
        }
        if bytes.count > Self.maximumFileBytes {
            throw FileSystemError(path: path, reason: .tooLarge(limitBytes: Self.maximumFileBytes))
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw FileSystemError(path: path, reason: .notUTF8)
        }
        return text
    }

    public func namesInDirectory(atPath path: String) throws(FileSystemError) -> [String]? {
        guard let directory = opendir(path) else {
            let code = errno
            if code == ENOENT { return nil }
            throw FileSystemError(path: path, reason: .unreadable(Self.message(code)))
        }
        defer { closedir(directory) }
        var names: [String] = []
        while true {
            errno = 0
            guard let entry = readdir(directory) else {
                if errno != 0 { throw FileSystemError(path: path, reason: .unreadable(Self.message(errno))) }
                return names
            }
            let name = withUnsafeBytes(of: entry.pointee.d_name) {
                String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
    }

    /// The system's own words ("Permission denied", "Is a directory").
    private static func message(_ code: Int32) -> String {
        String(cString: strerror(code))
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
