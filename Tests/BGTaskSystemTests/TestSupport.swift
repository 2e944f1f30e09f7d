// Helpers for the system tests: temporary directories, children that are always killed, bounded reads.
import BGTaskSystem
import Glibc
import Testing

/// A directory made with `mkdtemp` under `$TMPDIR` (or `/tmp`), removed with its contents by `remove()`.
struct TemporaryDirectory {
    let path: String

    init() throws {
        let base = getenv("TMPDIR").map { String(cString: $0) } ?? "/tmp"
        var template = Array("\(base)/bgtask-system-test-XXXXXX".utf8CString)
        guard let result = mkdtemp(&template) else { throw Errno(rawValue: errno, operation: "mkdtemp") }
        path = String(cString: result)
    }

    /// Removes the directory tree (files, sockets and subdirectories).
    func remove() {
        TemporaryDirectory.removeTree(path)
    }

    private static func removeTree(_ path: String) {
        var status = stat()
        guard lstat(path, &status) == 0 else { return }
        if status.st_mode & S_IFMT == S_IFDIR {
            if let directory = opendir(path) {
                var names: [String] = []
                while let entry = readdir(directory) {
                    let name = withUnsafeBytes(of: entry.pointee.d_name) { bytes in
                        String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
                    }
                    if name != "." && name != ".." { names.append(name) }
                }
                closedir(directory)
                for name in names { removeTree(path + "/" + name) }
            }
            rmdir(path)
        } else {
            unlink(path)
        }
    }

    /// Writes `text` to `name` inside the directory, creating subdirectories as needed; returns the path.
    @discardableResult
    func write(_ name: String, _ text: String) throws -> String {
        let full = path + "/" + name
        var directory = ""
        for component in name.split(separator: "/").dropLast() {
            directory += "/" + component
            mkdir(path + directory, 0o755)
        }
        let fd = try FileDescriptor.open(full, .writeOnly, options: [.create, .truncate])
        try fd.closeAfter { try fd.writeAll(Array(text.utf8)) }
        return full
    }
}

/// Runs `body` with a fresh temporary directory that is removed afterwards.
func withTemporaryDirectory<Result>(_ body: (TemporaryDirectory) throws -> Result) throws -> Result {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    return try body(directory)
}

/// Spawns `arguments` and runs `body` with the child; whatever happens, the child is killed by pidfd and
/// reaped afterwards. Every command given here bounds its own lifetime (`sleep 30`, `timeout 30 …`).
func withChild<Result>(
    _ arguments: [String],
    options: SpawnOptions = SpawnOptions(),
    _ body: (SpawnedProcess) throws -> Result
) throws -> Result {
    let child = try ProcessSpawner.spawn(arguments, options: options)
    defer {
        // Cleanup: the child may have exited and been reaped by `body` already (ESRCH, ECHILD then).
        try? child.pidFD.sendSignal(.kill)
        _ = try? child.waitForExit()
        try? child.pidFD.close()
    }
    return try body(child)
}

/// Reads from `fd` until `terminator` arrives or the end of file, waiting at most `timeout` in all.
func readUntil(_ terminator: UInt8, from fd: FileDescriptor, timeout: Duration = .seconds(20)) throws -> String {
    let deadline = MonotonicClock.now() + Int64(timeout.components.seconds) * 1_000_000_000
    var bytes: [UInt8] = []
    while !bytes.contains(terminator) {
        let remaining = deadline - MonotonicClock.now()
        let ready = try fd.poll(for: .readable, timeout: .nanoseconds(max(0, remaining)))
        guard !ready.isEmpty else { throw Errno(rawValue: ETIMEDOUT, operation: "readUntil(fd \(fd.rawValue))") }
        let chunk = try fd.read(upTo: 4096)
        if chunk.isEmpty { break }
        bytes += chunk
    }
    return String(decoding: bytes, as: UTF8.self)
}

/// Reads everything until end of file, with a bound on the total wait.
func readToEnd(_ fd: FileDescriptor, timeout: Duration = .seconds(20)) throws -> String {
    try readUntil(0, from: fd, timeout: timeout)
}

/// The python3 the tests drive lock holders and socket clients with (found through PATH by the spawner).
let python = "python3"
