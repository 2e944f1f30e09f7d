// A small disk for the daemon's state that the harness can fill: a size-limited tmpfs in a private mount namespace.

import BGTaskPOSIX
import Glibc

/// A tmpfs of `sizeBytes` mounted over `directory` inside a mount namespace of its own, held by a `sleep` under
/// `timeout(1)`: the daemon is started inside it (`nsenterPrefix`), the harness reaches it through
/// `/proc/HOLDER/root`, and nothing mounted outlives the holder and the daemons in the namespace. Nothing on a
/// real filesystem is ever filled.
final class StateDisk {
    /// The directory the tmpfs covers, inside the namespace (an empty directory outside it).
    let directory: String
    private let holder: SpawnedProcess
    /// The `sleep` in the namespace, whose `/proc/PID/root` and `ns/mnt` the harness uses.
    let namespacePID: pid_t
    private var filler: FileDescriptor?

    /// Mounts it; needs root. `lifetime` bounds the holder.
    init(directory: String, sizeBytes: Int, lifetime: Duration) throws {
        self.directory = directory
        let script = """
            mount --make-rprivate / && mount -t tmpfs -o size=\(sizeBytes),mode=0755 bgtask-soak-state '\(directory)' \
            && touch '\(directory)/.mounted' && exec sleep \(lifetime.components.seconds)
            """
        holder = try ProcessSpawner.spawn(
            [
                "timeout", "--kill-after=5", String(lifetime.components.seconds + 10), "unshare", "--mount", "sh", "-c",
                script,
            ],
            options: SpawnOptions(flags: .newProcessGroup))
        let deadline = MonotonicClock.now() + Duration.seconds(20).nanosecondCount
        var found: pid_t?
        while found == nil {
            if let text = try? ProcFS().read("\(holder.pid)/task/\(holder.pid)/children"),
                let child = text.split(separator: " ").first.flatMap({ pid_t($0) }),
                access("/proc/\(child)/root\(directory)/.mounted", F_OK) == 0
            {
                found = child
                break
            }
            guard MonotonicClock.now() < deadline, (try? holder.pidFD.hasExited) == false else {
                try? ProcessGroup(id: holder.pid).send(.kill)
                _ = try? holder.waitForExit()
                throw SoakError("the state's tmpfs could not be mounted in a private namespace (unshare, mount)")
            }
            usleep(20_000)
        }
        namespacePID = found!  // Set by the loop above, which only leaves with a value or by throwing.
    }

    /// The command that runs what follows inside the namespace.
    var nsenterPrefix: [String] { ["nsenter", "--mount=/proc/\(namespacePID)/ns/mnt", "--"] }

    /// The directory as the harness reaches it from outside the namespace.
    private var reachable: String { "/proc/\(namespacePID)/root\(directory)" }

    /// Fills the disk with a filler file until the kernel says it is full; the bytes written.
    func fill() throws -> Int {
        let descriptor = try FileDescriptor.open(
            reachable + "/filler", .writeOnly, options: [.create, .truncate], permissions: 0o600)
        filler = descriptor
        let chunk = [UInt8](repeating: 0x5A, count: 64 * 1024)
        var written = 0
        while true {
            let count = chunk.withUnsafeBytes { Glibc.write(descriptor.rawValue, $0.baseAddress, $0.count) }
            if count <= 0 { break }
            written += count
        }
        return written
    }

    /// Removes the filler: the disk has room again.
    func free() {
        unlink(reachable + "/filler")
        try? filler?.close()
        filler = nil
    }

    /// Frees the disk and ends the holder (the tmpfs goes with the last process in the namespace).
    func close() {
        free()
        try? ProcessGroup(id: holder.pid).send(.kill)
        _ = try? holder.waitForExit()
        try? holder.pidFD.close()
    }
}
