// A child of this process held between its clone and its exec, where a child another test spawns passes a moment.

import BGTaskPOSIX
import Foundation
import Glibc
import Synchronization

/// A child of this process held in a `posix_spawn` file action, between its clone and its exec: it holds a copy of
/// every descriptor the process had when it was cloned, close-on-exec or not.
public struct HeldChild: Sendable {
    /// Its process id.
    public let pid: pid_t

    /// Whether the child holds a copy of `descriptor`, a socket or a pipe: one of its `/proc/PID/fd` entries names
    /// the same object (`socket:[inode]`, `pipe:[inode]`) as this process's.
    ///
    /// An entry may go between the listing and its reading: once the child has opened the first FIFO (and this
    /// process's open of it has returned), glibc closes descriptor 0 before the second open, which then blocks.
    /// Only 0 and 1 change so; every other descriptor stays as the child was cloned with it.
    public func holdsCopy(of descriptor: FileDescriptor) throws -> Bool {
        let files = FileManager.default
        let own = try files.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(descriptor.rawValue)")
        return try files.contentsOfDirectory(atPath: "/proc/\(pid)/fd").contains {
            (try? files.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\($0)")) == own
        }
    }
}

/// Runs `body` while a child of this process is held between its clone and its exec.
///
/// The tests run in parallel in one process, and any of them may be spawning a child while another closes a
/// descriptor. From its clone until its exec (or until its spawner closes the rest), a child holds a copy of every
/// descriptor of the process, close-on-exec or not, so closing one here does not close what it refers to: a
/// listening socket goes on taking connections, a pipe's reader sees no end of file. That moment, which the suite
/// meets by chance, lasts here for as long as `body` runs.
///
/// The child is spawned with `posix_spawnp` (a vfork-like clone, as `ProcessSpawner` and Foundation's `Process`
/// spawn) with two file actions that open FIFOs: the first for writing, which returns once this function opens it
/// for reading (from then on the child holds its copies); the second for reading, which waits until `body` has
/// returned and this function opens it for writing. The child then executes `true` and is reaped. Each open meets
/// its partner on every path, a failed spawn included, so none waits forever.
public func withChildHeldBeforeExec<Result>(_ body: (HeldChild) throws -> Result) throws -> Result {
    let directory = try ScratchDirectory(prefix: "bgtask-held-child")
    defer { directory.remove() }
    let spawn = HeldSpawn(held: directory.path + "/held", release: directory.path + "/release")
    for path in [spawn.held, spawn.release] where mkfifo(path, 0o600) != 0 {
        throw HarnessError("mkfifo(\(path)): \(String(cString: strerror(errno)))")
    }
    try DetachedThread.start(name: "held-child") { spawn.run() }
    // Returns once the child has opened it for writing (or the spawner has, after a failed spawn).
    let heldEnd = try FileDescriptor.open(spawn.held, .readOnly)
    let outcome = Swift.Result { () throws -> Result in try body(HeldChild(pid: try spawn.childID())) }
    // Lets the child go on to its exec. Both ends stay open until the spawn is over, so that the spawner's opens
    // after a failed spawn meet them at once.
    let releaseEnd = try FileDescriptor.open(spawn.release, .writeOnly)
    let isOver = spawn.finished.wait(timeout: .now() + .seconds(60)) == .success
    try? releaseEnd.close()  // A FIFO's end: nothing is lost by a failed close.
    try? heldEnd.close()  // Likewise.
    guard isOver else { throw HarnessError("the held child was not spawned and reaped within 60 s") }
    if let failure = spawn.failure.withLock({ $0 }) { throw HarnessError(failure) }
    return try outcome.get()
}

/// The thread spawning the held child, and what became of the spawn.
private final class HeldSpawn: Sendable {
    /// The FIFO the child opens for writing once cloned.
    let held: String
    /// The FIFO the child then opens for reading, released after the body.
    let release: String
    /// The spawning thread's id, whose children list holds the child.
    let threadID = Mutex<pid_t?>(nil)
    /// Why the spawn failed, once it did.
    let failure = Mutex<String?>(nil)
    /// Signalled once the spawn is over and the child reaped.
    let finished = DispatchSemaphore(value: 0)

    init(held: String, release: String) {
        self.held = held
        self.release = release
    }

    /// The held child: the spawning thread's only child.
    func childID() throws -> pid_t {
        guard let thread = threadID.withLock({ $0 }) else { throw HarnessError("the spawning thread has no id") }
        let children = try String(contentsOfFile: "/proc/self/task/\(thread)/children", encoding: .utf8)
        guard let child = children.split(separator: " ").first.flatMap({ pid_t($0) }) else {
            throw HarnessError("the spawn failed before holding a child")
        }
        return child
    }

    func run() {
        defer { finished.signal() }
        // "/proc/thread-self" links to "PID/task/TID".
        let thread = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self"))
            .flatMap { $0.split(separator: "/").last }.flatMap { pid_t($0) }
        threadID.withLock { $0 = thread }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        // The program's standard output and input: `true` reads and writes neither.
        var code = posix_spawn_file_actions_addopen(&actions, 1, held, O_WRONLY, 0)
        if code == 0 { code = posix_spawn_file_actions_addopen(&actions, 0, release, O_RDONLY, 0) }
        var pid: pid_t = 0
        if code == 0 {
            // strdup: C strings that stay put for the call; nil only where Swift's own allocations already trap.
            var arguments: [UnsafeMutablePointer<CChar>?] = [strdup("true"), nil]
            defer { free(arguments[0]) }
            code = posix_spawnp(&pid, "true", &actions, nil, &arguments, environ)
        }
        guard code == 0 else {
            failure.withLock { $0 = "posix_spawnp(true): \(String(cString: strerror(code)))" }
            // The child ended before its exec, whichever opens it made: make them as it would have, so the ones
            // waiting on the other side return.
            for (path, flags) in [(held, O_WRONLY), (release, O_RDONLY)] {
                let descriptor = open(path, flags | O_CLOEXEC)
                if descriptor >= 0 { close(descriptor) }
            }
            return
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    }
}
