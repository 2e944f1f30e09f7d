// Waiting until a file another process writes to changes (inotify), for a reader that follows it as `tail -f` does.
import BGTaskPOSIX
import Glibc

/// An inotify watch on one file, reporting writes to it (`IN_MODIFY`, `IN_CLOSE_WRITE`): a reader that has read to
/// the end waits on it instead of reading again on a timer, and reads once `wait(timeout:)` says there is more.
public struct FileChangeWatch: Sendable {
    /// The inotify descriptor (non-blocking, close-on-exec).
    public let fileDescriptor: FileDescriptor

    /// Watches the file at `path`. Throws what `inotify_init1` or `inotify_add_watch` fail with
    /// (`.noSuchFileOrDirectory` when there is no such file yet, `.noSpace` past the user's watch limit).
    public init(path: String) throws(Errno) {
        let descriptor = FileDescriptor(
            rawValue: try systemCall("inotify_init1") { inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK)) })
        do throws(Errno) {
            _ = try systemCall("inotify_add_watch(\(path))") {
                inotify_add_watch(descriptor.rawValue, path, UInt32(IN_MODIFY | IN_CLOSE_WRITE))
            }
        } catch {
            try? descriptor.close()
            throw error
        }
        fileDescriptor = descriptor
    }

    /// Waits at most `timeout` for the file to be written to since the last wait; whether it was. The events are
    /// consumed, so the next wait waits for the next write.
    public func wait(timeout: Duration) throws(Errno) -> Bool {
        guard !(try fileDescriptor.poll(for: .readable, timeout: timeout)).isEmpty else { return false }
        // Each event is a struct inotify_event (16 bytes, no name for a watched file); drained until none is left.
        while true {
            do {
                if try fileDescriptor.read(upTo: 4_096).isEmpty { break }
            } catch  where error == .wouldBlock {
                break
            }
        }
        return true
    }

    /// Closes the watch.
    public func close() throws(Errno) {
        try fileDescriptor.close()
    }
}
