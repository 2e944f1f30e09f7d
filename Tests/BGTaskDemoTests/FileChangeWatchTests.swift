// The inotify watch a reader following a file waits on: a write wakes it, silence times out, a missing file throws.
import BGTaskDemo
import BGTaskPOSIX
import BGTaskTestSupport
import Glibc
import Testing

@Suite struct FileChangeWatchTests {
    @Test func aWriteEndsTheWaitAndEachWaitWaitsForTheNextWrite() throws {
        let directory = try ScratchDirectory(prefix: "bgtask-watch")
        let path = directory.path + "/app.log"
        let writer = try FileDescriptor.open(path, .writeOnly, options: [.create, .append], permissions: 0o600)
        defer { try? writer.close() }
        let watch = try FileChangeWatch(path: path)
        defer { try? watch.close() }
        let start = MonotonicClock.now()
        #expect(try !watch.wait(timeout: .milliseconds(30)))
        #expect(MonotonicClock.now() - start >= 30_000_000)
        // Several writes before a wait: one wait sees them all, and the next waits for a new one.
        try writer.writeAll(Array("first\n".utf8))
        try writer.writeAll(Array("second\n".utf8))
        #expect(try watch.wait(timeout: .seconds(10)))
        #expect(try !watch.wait(timeout: .zero))
        try writer.writeAll(Array("third\n".utf8))
        #expect(try watch.wait(timeout: .seconds(10)))
    }

    @Test func aMissingFileCannotBeWatched() throws {
        let directory = try ScratchDirectory(prefix: "bgtask-watch")
        #expect(throws: Errno.noSuchFileOrDirectory) { try FileChangeWatch(path: directory.path + "/none.log") }
    }

    /// Close-on-exec from inotify_init1 (`IN_CLOEXEC`), as every descriptor the system layer makes: a child spawned
    /// by another thread must not keep it through its exec.
    @Test func theWatchIsCloseOnExec() throws {
        let directory = try ScratchDirectory(prefix: "bgtask-watch")
        let path = directory.path + "/app.log"
        let file = try FileDescriptor.open(path, .writeOnly, options: [.create], permissions: 0o600)
        try file.close()
        let watch = try FileChangeWatch(path: path)
        defer { try? watch.close() }
        #expect(fcntl(watch.fileDescriptor.rawValue, F_GETFD) & FD_CLOEXEC != 0)
    }
}
