// Helpers for the system tests: temporary directories, children that are always killed, bounded reads.
import BGTaskPOSIX
import BGTaskTestSupport
import Glibc
import Testing

/// Runs `body` with a fresh temporary directory that is removed afterwards.
func withTemporaryDirectory<Result>(_ body: (ScratchDirectory) throws -> Result) throws -> Result {
    let directory = try ScratchDirectory(prefix: "bgtask-system-test")
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
