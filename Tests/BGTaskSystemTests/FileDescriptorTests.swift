// Descriptors: bounded polls, closeAfter on every path, non-blocking mode, short reads, close-on-exec from the start.
import BGTaskPOSIX
import BGTaskSystem
import BGTaskTestSupport
import Glibc
import Testing

private struct BodyFailed: Error {}

@Suite struct FileDescriptorTests {
    @Test func pollWaitsAtLeastTheTimeoutAndReportsReadiness() throws {
        let (readEnd, writeEnd) = try FileDescriptor.pipe()
        defer { try? readEnd.close() }
        let start = MonotonicClock.now()
        #expect(try readEnd.poll(for: .readable, timeout: .milliseconds(30)).isEmpty)
        #expect(MonotonicClock.now() - start >= 30_000_000)
        #expect(try readEnd.poll(for: .readable, timeout: .zero).isEmpty)
        try writeEnd.closeAfter {
            #expect(try writeEnd.poll(for: .writable, timeout: nil) == .writable)
            try writeEnd.writeAll([7])
            #expect(try readEnd.poll(for: .readable, timeout: nil) == .readable)
        }
        #expect(try readEnd.read(upTo: 8) == [7])
        // Not `.zero`: a child being spawned by a concurrent test holds a copy of the write end until its exec.
        #expect(try readEnd.poll(for: .readable, timeout: .seconds(10)).contains(.hangUp))
    }

    @Test func closeAfterClosesOnSuccessAndOnError() throws {
        // Closed is seen from the other end of a pipe, not by the number: tests run in parallel, and another may
        // open a descriptor that takes the number as soon as it is free.
        let (firstReader, firstWriter) = try FileDescriptor.pipe()
        defer { try? firstReader.close() }
        #expect(try firstWriter.closeAfter { 42 } == 42)
        // Not `.zero`: a child being spawned by a concurrent test holds a copy of the write end until its exec.
        #expect(try firstReader.poll(for: .readable, timeout: .seconds(10)).contains(.hangUp))
        let (secondReader, secondWriter) = try FileDescriptor.pipe()
        defer { try? secondReader.close() }
        #expect(throws: BodyFailed.self) { try secondWriter.closeAfter { throw BodyFailed() } }
        #expect(try secondReader.poll(for: .readable, timeout: .seconds(10)).contains(.hangUp))
    }

    @Test func descriptorsAreCloseOnExecAndNonBlockingCanBeToggled() throws {
        let (readEnd, writeEnd) = try FileDescriptor.pipe()
        defer {
            try? readEnd.close()
            try? writeEnd.close()
        }
        #expect(fcntl(readEnd.rawValue, F_GETFD) & FD_CLOEXEC != 0)
        let copy = try readEnd.duplicate()
        defer { try? copy.close() }
        #expect(fcntl(copy.rawValue, F_GETFD) & FD_CLOEXEC != 0)
        #expect(try !readEnd.isNonBlocking)
        try readEnd.setNonBlocking()
        #expect(try readEnd.isNonBlocking)
        #expect(throws: Errno.wouldBlock) { try readEnd.read(upTo: 1) }
        try readEnd.setNonBlocking(false)
        #expect(try !readEnd.isNonBlocking)
    }

    @Test func readToEndStopsAtTheLimit() throws {
        let (readEnd, writeEnd) = try FileDescriptor.pipe()
        defer { try? readEnd.close() }
        try writeEnd.writeAll([UInt8](repeating: 1, count: 1000))
        try writeEnd.close()
        #expect(try readEnd.readToEnd(limit: 100).count == 100)
    }

    @Test func monotonicClockNeverGoesBackwards() {
        var previous = MonotonicClock.now()
        for _ in 0..<1000 {
            let now = MonotonicClock.now()
            #expect(now >= previous)
            previous = now
        }
    }
}

/// Every descriptor the system layer hands out is close-on-exec from the call that makes it (`O_CLOEXEC`,
/// `SOCK_CLOEXEC`, `accept4`, `pipe2`, `F_DUPFD_CLOEXEC`, `EFD_CLOEXEC`, a pidfd), with no `fcntl` after it: a
/// child another thread spawns in between would keep one through its exec. (The demo's inotify watch, made with
/// `IN_CLOEXEC`, is checked in `FileChangeWatchTests`.)
@Suite struct CloseOnExecTests {
    @Test func everyDescriptorTheSystemLayerMakesIsCloseOnExec() async throws {
        try await offThePool {
            try withTemporaryDirectory { directory in
                var made: [(what: String, descriptor: FileDescriptor)] = []
                defer { for entry in made { try? entry.descriptor.close() } }
                let file = try directory.write("file", "text")
                made.append(("FileDescriptor.open", try FileDescriptor.open(file, .readOnly)))
                let (readEnd, writeEnd) = try FileDescriptor.pipe()
                made += [("FileDescriptor.pipe (read end)", readEnd), ("FileDescriptor.pipe (write end)", writeEnd)]
                made.append(("FileDescriptor.duplicate", try readEnd.duplicate()))
                let listener = try UnixSocket.listen(path: directory.path + "/stream.sock")
                made.append(("UnixSocket.listen", listener))
                made.append(("UnixSocket.connect", try UnixSocket.connect(path: directory.path + "/stream.sock")))
                _ = try listener.poll(for: .readable, timeout: .seconds(10))
                let accepted = try #require(try UnixSocket.accept(listener))
                made.append(("UnixSocket.accept", accepted))
                let (first, second) = try UnixSocket.pair()
                made += [("UnixSocket.pair (first)", first), ("UnixSocket.pair (second)", second)]
                made.append(("UnixSocket.bindDatagram", try UnixSocket.bindDatagram(path: directory.path + "/dgram")))
                made.append(("PidFD.open", try PidFD.open(pid: getpid()).fileDescriptor))
                if let peer = try UnixSocket.peerPidFD(of: accepted) {
                    made.append(("UnixSocket.peerPidFD", peer.fileDescriptor))
                }
                #expect(mkfifo(directory.path + "/pressure.fifo", 0o600) == 0)
                let watch = try MemoryPressureWatch.open(path: directory.path + "/pressure.fifo", write: nil)
                made.append(("MemoryPressureWatch (FIFO)", watch.fileDescriptor))
                for entry in made {
                    #expect(fcntl(entry.descriptor.rawValue, F_GETFD) & FD_CLOEXEC != 0, "\(entry.what)")
                }

                let worker = try BackgroundWorker<Int, Int>(name: "test-cloexec", capacity: 1) { $0 }
                defer { worker.stop() }
                #expect(fcntl(worker.outcomesReady.rawValue, F_GETFD) & FD_CLOEXEC != 0, "BackgroundWorker")
            }
        }
    }
}
