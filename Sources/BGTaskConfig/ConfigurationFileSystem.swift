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

/// What opening a file found: its text, or, when the status of what was opened is not acceptable, that status.
public enum FileRead: Hashable, Sendable {
    /// The file was accepted and read.
    case read(FileStatus, String)
    /// What was opened was not accepted (its status is given), and nothing was read from it.
    case declined(FileStatus)
}

/// What the loader needs from a file system: looking a name up without following it, opening a file without
/// following a link and judging what was opened before reading it, and listing a directory; each tells "nothing
/// there" (nil) apart from "there but unreadable" (an error).
public protocol ConfigurationFileSystem: Sendable {
    /// What is at `path` itself (`lstat`, and `readlink` for a symbolic link, which is not followed).
    func lookUp(_ path: String) -> PathLookup

    /// Opens the file at `path` without following a symbolic link in its last name (`O_NOFOLLOW`), and reads it
    /// only when `accept` takes the status of what was opened (`fstat` of the descriptor); nil when nothing is there.
    func readFile(atPath path: String, accepting accept: (FileStatus) -> Bool) throws(FileSystemError) -> FileRead?

    /// The names of the entries of the directory at `path`, in any order, or nil when nothing exists there.
    func namesInDirectory(atPath path: String) throws(FileSystemError) -> [String]?

    /// What relative paths are relative to.
    func workingDirectory() -> String
}

/// The real file system, through the C library.
public struct LocalFileSystem: ConfigurationFileSystem {
    /// The largest file read: 1 MiB, systemd's `LONG_LINE_MAX` for one line of a unit file.
    public static let maximumFileBytes = 1 << 20

    /// The real file system.
    public init() {}

    public func lookUp(_ path: String) -> PathLookup {
        var information = stat()
        guard lstat(path, &information) == 0 else {
            let code = errno
            return code == ENOENT || code == ENOTDIR ? .missing : .failed(Self.message(code))
        }
        let status = Self.status(information)
        guard status.kind == .symbolicLink else { return .found(PathEntry(status: status)) }
        // A link's target is at most PATH_MAX bytes; one more tells a longer one (which the kernel cannot follow).
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink(path, &buffer, buffer.count)
        guard count >= 0 else {
            let code = errno
            return code == ENOENT ? .missing : .failed(Self.message(code))
        }
        guard count < buffer.count else { return .failed("its target is longer than PATH_MAX") }
        let target = buffer[..<count].withUnsafeBufferPointer { characters in
            String(decoding: UnsafeRawBufferPointer(characters), as: UTF8.self)
        }
        return .found(PathEntry(status: status, linkTarget: target))
    }

    public func readFile(
        atPath path: String, accepting accept: (FileStatus) -> Bool
    ) throws(FileSystemError) -> FileRead? {
        // O_NONBLOCK: a FIFO put in the file's place must not block the open until a writer comes (it is then
        // declined, never read); O_NOCTTY: a terminal must not become the daemon's.
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY)
        guard descriptor >= 0 else {
            let code = errno
            if code == ENOENT { return nil }
            throw FileSystemError(path: path, reason: .unreadable(Self.message(code)))
        }
        // Opened read-only: a close error cannot lose data.
        defer { close(descriptor) }
        var information = stat()
        guard fstat(descriptor, &information) == 0 else {
            throw FileSystemError(path: path, reason: .unreadable(Self.message(errno)))
        }
        let status = Self.status(information)
        guard accept(status) else { return .declined(status) }
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
        return .read(status, text)
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

    public func workingDirectory() -> String {
        guard let directory = getcwd(nil, 0) else { return "/" }
        defer { free(directory) }
        return String(cString: directory)
    }

    /// The status in `stat`'s words.
    static func status(_ information: stat) -> FileStatus {
        let kind: FileKind
        switch information.st_mode & S_IFMT {
        case S_IFREG: kind = .regularFile
        case S_IFDIR: kind = .directory
        case S_IFLNK: kind = .symbolicLink
        case S_IFIFO: kind = .fifo
        case S_IFCHR: kind = .characterDevice
        case S_IFBLK: kind = .blockDevice
        case S_IFSOCK: kind = .socket
        default: kind = .unknown
        }
        return FileStatus(
            kind: kind, ownerID: information.st_uid, groupID: information.st_gid,
            mode: UInt32(information.st_mode & 0o7777), device: UInt64(information.st_dev),
            inode: UInt64(information.st_ino))
    }

    /// The system's own words ("Permission denied", "Is a directory").
    private static func message(_ code: Int32) -> String {
        String(cString: strerror(code))
    }
}

/// A file tree held in memory, for tests and for embedding a configuration: paths map to file contents, symbolic
/// links, special files and empty directories; other directories exist as the parents of what is there. Every
/// file is owned by root with mode 0644 and every directory with mode 0755, unless `attributes` says otherwise;
/// chosen paths can be made unreadable.
public struct InMemoryFileSystem: ConfigurationFileSystem {
    /// The owner, group and mode of one path.
    public struct Attributes: Hashable, Sendable {
        /// The owner's uid.
        public var ownerID: UInt32
        /// The group's gid.
        public var groupID: UInt32
        /// The permission bits, with set-user-id, set-group-id and sticky.
        public var mode: UInt32

        /// Creates attributes.
        public init(ownerID: UInt32 = 0, groupID: UInt32 = 0, mode: UInt32) {
            self.ownerID = ownerID
            self.groupID = groupID
            self.mode = mode
        }
    }

    /// File contents by absolute path.
    public var files: [String: String]
    /// Paths (files or directories) that exist but fail to read, with the message to fail with.
    public var unreadable: [String: String]
    /// Symbolic links by absolute path, with their targets.
    public var symbolicLinks: [String: String]
    /// Files that are neither regular files, directories nor links (FIFOs, devices, sockets), by absolute path.
    public var specialFiles: [String: FileKind]
    /// Directories that exist even with nothing in them.
    public var directories: Set<String>
    /// Owners, groups and modes other than the defaults (root, 0644 for files, 0755 for directories), by path.
    public var attributes: [String: Attributes]
    /// Paths whose lookup fails (`lstat` refused, as with `EACCES`), with the message to fail with.
    public var uncheckable: [String: String]

    /// Creates a tree of `files`, with `unreadable` paths failing to read.
    public init(
        files: [String: String] = [:], unreadable: [String: String] = [:], symbolicLinks: [String: String] = [:],
        specialFiles: [String: FileKind] = [:], directories: Set<String> = [], attributes: [String: Attributes] = [:],
        uncheckable: [String: String] = [:]
    ) {
        self.files = files
        self.unreadable = unreadable
        self.symbolicLinks = symbolicLinks
        self.specialFiles = specialFiles
        self.directories = directories
        self.attributes = attributes
        self.uncheckable = uncheckable
    }

    public func lookUp(_ path: String) -> PathLookup {
        if let message = uncheckable[path] { return .failed(message) }
        guard let kind = kind(at: path) else { return .missing }
        let defaults =
            kind == .directory ? Attributes(mode: 0o755) : Attributes(mode: kind == .symbolicLink ? 0o777 : 0o644)
        let owned = attributes[path] ?? defaults
        let status = FileStatus(kind: kind, ownerID: owned.ownerID, groupID: owned.groupID, mode: owned.mode & 0o7777)
        return .found(PathEntry(status: status, linkTarget: symbolicLinks[path]))
    }

    public func readFile(
        atPath path: String, accepting accept: (FileStatus) -> Bool
    ) throws(FileSystemError) -> FileRead? {
        switch lookUp(path) {
        case .missing:
            return nil
        case .failed(let message):
            throw FileSystemError(path: path, reason: .unreadable(message))
        case .found(let entry):
            if entry.status.kind == .symbolicLink {
                throw FileSystemError(path: path, reason: .unreadable("Too many levels of symbolic links"))
            }
            if let message = unreadable[path] { throw FileSystemError(path: path, reason: .unreadable(message)) }
            guard accept(entry.status) else { return .declined(entry.status) }
            guard let text = files[path] else {
                throw FileSystemError(
                    path: path, reason: .unreadable(entry.status.kind == .directory ? "Is a directory" : "Not readable")
                )
            }
            return .read(entry.status, text)
        }
    }

    public func namesInDirectory(atPath path: String) throws(FileSystemError) -> [String]? {
        if let message = unreadable[path] { throw FileSystemError(path: path, reason: .unreadable(message)) }
        switch kind(at: path) {
        case nil: return nil
        case .directory: return namesBelow(path)
        default: throw FileSystemError(path: path, reason: .unreadable("Not a directory"))
        }
    }

    public func workingDirectory() -> String { "/" }

    /// What is at `path`, or nil when nothing is.
    private func kind(at path: String) -> FileKind? {
        if symbolicLinks[path] != nil { return .symbolicLink }
        if files[path] != nil { return .regularFile }
        if let kind = specialFiles[path] { return kind }
        if path == "/" || directories.contains(path) || !namesBelow(path).isEmpty { return .directory }
        // An unreadable path that is nothing else is a file that cannot be read.
        return unreadable[path] != nil ? .regularFile : nil
    }

    /// The names directly below `path`: of files, links, special files, directories and unreadable paths.
    private func namesBelow(_ path: String) -> [String] {
        let prefix = path.hasSuffix("/") ? path : path + "/"
        var names = Set<String>()
        let everything = [
            Array(files.keys), Array(unreadable.keys), Array(symbolicLinks.keys),
            Array(specialFiles.keys), Array(directories),
        ].joined()
        for filePath in everything where filePath.hasPrefix(prefix) {
            if let name = filePath.dropFirst(prefix.count).split(separator: "/").first {
                names.insert(String(name))
            }
        }
        return Array(names)
    }
}
