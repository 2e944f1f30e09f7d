// PSI triggers and systemd's memory pressure protocol: the trigger text, strict base64, the environment, and the
// three kinds of watch on real kernel files (a scratch cgroup's memory.pressure, /proc/pressure/memory, a FIFO, a
// Unix socket). Nothing here waits for a trigger to fire: idle triggers are checked to stay quiet.

import BGTaskPOSIX
import BGTaskSystem
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

/// What systemd 252+ sets `MEMORY_PRESSURE_WRITE` to by default: "some 200000 2000000" and its NUL.
private let systemdDefaultWrite = "c29tZSAyMDAwMDAgMjAwMDAwMAA="

/// The error `body` threw, as a `MemoryPressureWatchError`; records an issue when it threw nothing or another type.
private func watchError(
    _ body: () throws -> Void, sourceLocation: SourceLocation = #_sourceLocation
) -> MemoryPressureWatchError? {
    do {
        try body()
        Issue.record("no error thrown", sourceLocation: sourceLocation)
    } catch let error as MemoryPressureWatchError {
        return error
    } catch {
        Issue.record("threw \(type(of: error)): \(error)", sourceLocation: sourceLocation)
    }
    return nil
}

/// A `sockaddr_un` for `path` (tests keep their socket paths short).
private func socketAddress(_ path: String) -> sockaddr_un {
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
    return address
}

/// A listening `AF_UNIX` socket of `type` at `path` (only bound, with `listens` false), blocking, close-on-exec.
private func listeningSocket(_ path: String, type: __socket_type, listens: Bool = true) throws -> FileDescriptor {
    let fd = socket(AF_UNIX, Int32(type.rawValue | SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw Errno(rawValue: errno, operation: "socket") }
    var address = socketAddress(path)
    let bound = withUnsafePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
        }
    }
    guard bound == 0, !listens || listen(fd, 4) == 0 else {
        let error = Errno(rawValue: errno, operation: "bind/listen(\(path))")
        close(fd)
        throw error
    }
    return FileDescriptor(rawValue: fd)
}

/// Accepts the connection the watch made (it is pending by the time `open` returns), bounded; non-blocking.
private func acceptConnection(_ listener: FileDescriptor) throws -> FileDescriptor {
    guard try !listener.poll(for: .readable, timeout: .seconds(10)).isEmpty else {
        throw HarnessError("nobody connected to the listener")
    }
    guard let connection = try UnixSocket.accept(listener) else { throw HarnessError("the connection went away") }
    return connection
}

/// Reads exactly `count` bytes from a blocking stream, waiting at most 10 s for each part.
private func readExactly(_ count: Int, from fd: FileDescriptor) throws -> [UInt8] {
    var bytes: [UInt8] = []
    while bytes.count < count {
        guard try !fd.poll(for: .readable, timeout: .seconds(10)).isEmpty else {
            throw HarnessError("only \(bytes.count) of \(count) bytes arrived")
        }
        let chunk = try fd.read(upTo: count - bytes.count)
        if chunk.isEmpty { break }
        bytes += chunk
    }
    return bytes
}

@Suite("memory pressure triggers, base64 and systemd's memory pressure protocol")
struct MemoryPressureWatchTests {
    // MARK: Triggers

    @Test(
        "a trigger renders as the kernel reads it, microseconds on the wire",
        arguments: [
            (MemoryPressureTrigger(kind: .some, stall: .milliseconds(150), window: .seconds(2)), "some 150000 2000000"),
            (MemoryPressureTrigger(kind: .full, stall: .milliseconds(100), window: .seconds(1)), "full 100000 1000000"),
            (MemoryPressureTrigger.systemdDefault, "some 200000 2000000"),
            // Below a microsecond is dropped, not rounded up; negative clamps to 0, as `%u` could not take it.
            (MemoryPressureTrigger(kind: .some, stall: .nanoseconds(1_999), window: .seconds(10)), "some 1 10000000"),
            (MemoryPressureTrigger(kind: .some, stall: .milliseconds(-5), window: .seconds(2)), "some 0 2000000"),
        ])
    func triggerText(trigger: MemoryPressureTrigger, text: String) {
        #expect(trigger.kernelText == text)
        #expect(trigger.description == text)
        #expect(trigger.kernelBytes == Array(text.utf8) + [0])
    }

    @Test("systemd's default is 200 ms of some stall in a 2 s window")
    func systemdDefault() {
        let trigger = MemoryPressureTrigger.systemdDefault
        #expect(trigger.kind == MemoryPressureTrigger.Kind.some)
        #expect(trigger.stall == .milliseconds(200))
        #expect(trigger.window == .seconds(2))
        #expect(trigger.hasUnprivilegedWindow)
    }

    @Test(
        "parsing takes the kernel's text and its NUL, and nothing else",
        arguments: [
            ("some 150000 2000000", MemoryPressureTrigger(kind: .some, stall: .milliseconds(150), window: .seconds(2))),
            (
                "some 150000 2000000\0",
                MemoryPressureTrigger(kind: .some, stall: .milliseconds(150), window: .seconds(2))
            ),
            (
                "full 0 4294967295",
                MemoryPressureTrigger(kind: .full, stall: .zero, window: .microseconds(4_294_967_295))
            ),
            ("", nil), ("some", nil), ("some 1", nil), ("some 1 2 3", nil), ("some  1 2", nil), (" some 1 2", nil),
            ("some 1 2 ", nil), ("some 1 2\n", nil), ("some 1 2\0\0", nil), ("some\01 2", nil), ("SOME 1 2", nil),
            ("any 1 2", nil), ("some -1 2", nil), ("some +1 2", nil), ("some 0x10 2", nil), ("some 1 4294967296", nil),
            ("some 99999999999999999999 2", nil), ("some １ 2", nil), ("some 1.5 2", nil),
        ] as [(String, MemoryPressureTrigger?)])
    func parse(text: String, expected: MemoryPressureTrigger?) {
        #expect(MemoryPressureTrigger.parse(text) == expected)
    }

    @Test("parsing what a trigger renders gives the trigger back")
    func parseRoundTrip() {
        var generator = SeededGenerator(seed: 0x9a1)
        for _ in 0..<200 {
            let trigger = MemoryPressureTrigger(
                kind: Bool.random(using: &generator) ? .some : .full,
                stall: .microseconds(Int64.random(in: 0...Int64(UInt32.max), using: &generator)),
                window: .microseconds(Int64.random(in: 0...Int64(UInt32.max), using: &generator)))
            #expect(MemoryPressureTrigger.parse(trigger.kernelText) == trigger)
            #expect(MemoryPressureTrigger.parse(String(decoding: trigger.kernelBytes, as: UTF8.self)) == trigger)
        }
    }

    @Test(
        "the unprivileged window is the window rounded up to a whole multiple of 2 s",
        arguments: [
            (Duration.milliseconds(500), false, Duration.seconds(2)), (.seconds(1), false, .seconds(2)),
            (.seconds(2), true, .seconds(2)), (.seconds(3), false, .seconds(4)), (.seconds(4), true, .seconds(4)),
            (.milliseconds(9_500), false, .seconds(10)), (.zero, false, .seconds(2)),
        ])
    func unprivilegedWindow(window: Duration, isUnprivileged: Bool, widened: Duration) {
        let trigger = MemoryPressureTrigger(kind: .full, stall: .milliseconds(150), window: window)
        #expect(trigger.hasUnprivilegedWindow == isUnprivileged)
        #expect(
            trigger.withUnprivilegedWindow
                == MemoryPressureTrigger(kind: .full, stall: .milliseconds(150), window: widened))
    }

    // MARK: Base64

    @Test(
        "base64 encodes and decodes RFC 4648's test vectors and systemd's default",
        arguments: [
            ("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"), ("some 200000 2000000\0", systemdDefaultWrite),
        ])
    func base64Vectors(plain: String, encoded: String) throws {
        #expect(Base64.encode(Array(plain.utf8)) == encoded)
        #expect(try Base64.decode(encoded) == Array(plain.utf8))
    }

    @Test("base64 round trips every byte value and every length, and agrees with Foundation")
    func base64RoundTrips() throws {
        let everyByte = (0...255).map { UInt8($0) }
        #expect(try Base64.decode(Base64.encode(everyByte)) == everyByte)
        #expect(Base64.encode(everyByte) == Data(everyByte).base64EncodedString())
        var generator = SeededGenerator(seed: 0xba5e64)
        for length in 0...100 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let encoded = Base64.encode(bytes)
            #expect(encoded == Data(bytes).base64EncodedString(), "length \(length)")
            #expect(encoded.utf8.count == (length + 2) / 3 * 4)
            #expect(try Base64.decode(encoded) == bytes, "length \(length)")
        }
    }

    @Test(
        "base64 decoding is strict: each malformed text is refused with the reason",
        arguments: [
            ("Zg=", Base64.DecodingError.invalidLength(3)), ("Zg", .invalidLength(2)), ("Zm9vY", .invalidLength(5)),
            ("Zg==\n", .invalidLength(5)), ("Zm9v!A==", .invalidCharacter(0x21, offset: 4)),
            ("Zm 9", .invalidCharacter(0x20, offset: 2)), ("Zm9\n", .invalidCharacter(0x0A, offset: 3)),
            ("Zm-_", .invalidCharacter(0x2D, offset: 2)), ("Zé=", .invalidCharacter(0xC3, offset: 1)),
            ("Zm9\0", .invalidCharacter(0x00, offset: 3)), ("=Zg=", .misplacedPadding(offset: 0)),
            ("Z=g=", .misplacedPadding(offset: 1)), ("Zg=A", .misplacedPadding(offset: 2)),
            ("====", .misplacedPadding(offset: 0)), ("Zg==Zg==", .misplacedPadding(offset: 2)),
            ("Zm8=Zm9v", .misplacedPadding(offset: 3)), ("Zh==", .nonZeroTrailingBits), ("Zm9=", .nonZeroTrailingBits),
        ])
    func base64Malformed(text: String, expected: Base64.DecodingError) {
        #expect(throws: expected) { try Base64.decode(text) }
    }

    @Test("a base64 error says what is wrong and where")
    func base64ErrorDescriptions() {
        #expect("\(Base64.DecodingError.invalidCharacter(0x21, offset: 4))" == "unexpected character '!' at offset 4")
        #expect("\(Base64.DecodingError.invalidCharacter(0x0A, offset: 3))" == "unexpected character 0xA at offset 3")
        #expect("\(Base64.DecodingError.invalidLength(5))" == "length 5 is not a multiple of 4")
        #expect("\(Base64.DecodingError.misplacedPadding(offset: 1))" == "padding '=' at offset 1 is not at the end")
        #expect("\(Base64.DecodingError.nonZeroTrailingBits)" == "the bits after the last byte are not zero")
    }

    // MARK: The environment

    @Test(
        "the environment: absent, off, a path, a path with bytes",
        arguments: [
            ([:], nil), (["MEMORY_PRESSURE_WRITE": systemdDefaultWrite], nil),
            (["MEMORY_PRESSURE_WATCH": ""], .off), (["MEMORY_PRESSURE_WATCH": "/dev/null"], .off),
            // Off wins: the bytes are not even decoded.
            (["MEMORY_PRESSURE_WATCH": "/dev/null", "MEMORY_PRESSURE_WRITE": "!!"], .off),
            (["MEMORY_PRESSURE_WATCH": "/x/memory.pressure"], .watch(path: "/x/memory.pressure", write: nil)),
            (
                ["MEMORY_PRESSURE_WATCH": "/x/memory.pressure", "MEMORY_PRESSURE_WRITE": systemdDefaultWrite],
                .watch(path: "/x/memory.pressure", write: MemoryPressureTrigger.systemdDefault.kernelBytes)
            ),
            (["MEMORY_PRESSURE_WATCH": "/x", "MEMORY_PRESSURE_WRITE": ""], .watch(path: "/x", write: [])),
        ] as [([String: String], MemoryPressureWatch.EnvironmentRequest?)])
    func environmentRequests(environment: [String: String], expected: MemoryPressureWatch.EnvironmentRequest?) throws {
        #expect(try MemoryPressureWatch.EnvironmentRequest.parse(environment) == expected)
    }

    @Test(
        "the environment: a relative or unnormalized path, or bytes that are not base64, are errors naming both",
        arguments: [
            (["MEMORY_PRESSURE_WATCH": "memory.pressure"], MemoryPressureWatchError.Reason.invalidPath),
            (["MEMORY_PRESSURE_WATCH": "/sys/fs/cgroup/../memory.pressure"], .invalidPath),
            (["MEMORY_PRESSURE_WATCH": "/sys/./memory.pressure"], .invalidPath),
            (
                [
                    "MEMORY_PRESSURE_WATCH": "/x/memory.pressure",
                    "MEMORY_PRESSURE_WRITE": "c29tZSAyMDAwMDAgMjAwMDAwMAA",
                ],
                .invalidWrite(.invalidLength(27))
            ),
            (
                ["MEMORY_PRESSURE_WATCH": "/x/memory.pressure", "MEMORY_PRESSURE_WRITE": "some 2000000"],
                .invalidWrite(.invalidCharacter(0x20, offset: 4))
            ),
        ])
    func environmentErrors(environment: [String: String], reason: MemoryPressureWatchError.Reason) throws {
        let path = try #require(environment["MEMORY_PRESSURE_WATCH"])
        let parseError = watchError { _ = try MemoryPressureWatch.EnvironmentRequest.parse(environment) }
        #expect(parseError == MemoryPressureWatchError(path: path, reason: reason))
        // fromEnvironment fails the same way, before touching the file system.
        let openError = watchError { _ = try MemoryPressureWatch.fromEnvironment(environment) }
        #expect(openError == parseError)
        let description = try #require(openError).description
        #expect(description.contains(path), "\(description)")
        if case .invalidWrite = reason {
            #expect(description.contains("MEMORY_PRESSURE_WRITE is not base64"), "\(description)")
        }
    }

    @Test("fromEnvironment: nil without the variables, .off for /dev/null and an empty path")
    func fromEnvironmentAbsentAndOff() throws {
        #expect(try MemoryPressureWatch.fromEnvironment([:]) == nil)
        #expect(try MemoryPressureWatch.fromEnvironment(["MEMORY_PRESSURE_WRITE": systemdDefaultWrite]) == nil)
        #expect(try MemoryPressureWatch.fromEnvironment(["MEMORY_PRESSURE_WATCH": "/dev/null"]) == .off)
        #expect(try MemoryPressureWatch.fromEnvironment(["MEMORY_PRESSURE_WATCH": ""]) == .off)
    }

    @Test("paths that are none of the three kinds are refused by what they are, naming the path")
    func unsupportedPaths() throws {
        try withTemporaryDirectory { directory in
            let missing = directory.path + "/missing"
            let error = watchError { _ = try MemoryPressureWatch.open(path: missing, write: nil) }
            #expect(error?.path == missing)
            #expect(error?.errno == .noSuchFileOrDirectory)
            #expect(error?.description.contains(missing) == true)

            #expect(
                watchError { _ = try MemoryPressureWatch.open(path: directory.path, write: nil) }
                    == MemoryPressureWatchError(path: directory.path, reason: .unsupportedFileType("directory")))
            #expect(
                watchError { _ = try MemoryPressureWatch.open(path: "/dev/zero", write: nil) }
                    == MemoryPressureWatchError(path: "/dev/zero", reason: .unsupportedFileType("character device")))
            // A regular file outside procfs and cgroup2 is not a PSI file, and nothing is written to it.
            let plain = try directory.write("pressure", "untouched")
            #expect(
                watchError { _ = try MemoryPressureWatch.open(path: plain, write: Array("some 1 2".utf8)) }
                    == MemoryPressureWatchError(path: plain, reason: .notAPressureFile))
            #expect(try String(contentsOfFile: plain, encoding: .utf8) == "untouched")
        }
    }

    @Test("the launch side: a cgroup's memory.pressure and the trigger's base64, as systemd sets them")
    func launchEnvironment() throws {
        let cgroup = CgroupDirectory(path: "/sys/fs/cgroup/unified/app.scope")
        #expect(
            MemoryPressureWatch.environment(for: cgroup) == [
                "MEMORY_PRESSURE_WATCH": "/sys/fs/cgroup/unified/app.scope/memory.pressure",
                "MEMORY_PRESSURE_WRITE": systemdDefaultWrite,
            ])
        let trigger = MemoryPressureTrigger(kind: .full, stall: .milliseconds(150), window: .seconds(4))
        let environment = MemoryPressureWatch.environment(for: cgroup, trigger: trigger)
        let request = try MemoryPressureWatch.EnvironmentRequest.parse(environment)
        guard case .watch(let path, let write?) = request else {
            Issue.record("not a watch with bytes: \(String(describing: request))")
            return
        }
        #expect(path == cgroup.path + "/memory.pressure")
        #expect(MemoryPressureTrigger.parse(String(decoding: write, as: UTF8.self)) == trigger)
    }

    // MARK: PSI files

    @Test(
        "cgroup2: a trigger arms on a scratch memory.pressure, polls quiet, and ends when the cgroup goes",
        .requires(.cgroup(.unified)))
    func scratchCgroupTrigger() async throws {
        try await offThePool {
            let scratch = try ScratchCgroup(.unified)
            defer { scratch.close() }
            let path = scratch.cgroup.path + "/memory.pressure"
            let trigger = MemoryPressureTrigger(kind: .some, stall: .milliseconds(150), window: .seconds(2))
            let watch = try MemoryPressureWatch.armPSI(path: path, trigger: trigger)
            defer { try? watch.close() }
            #expect(watch.kind == .psi)
            #expect(watch.path == path)
            #expect(watch.events == .priority)
            #expect(watch.trigger == trigger)
            #expect(watch.description == "psi \(path) (some 150000 2000000)")
            #expect(try watch.fileDescriptor.poll(for: watch.events, timeout: .zero).isEmpty)
            #expect(try watch.acknowledge([]) == .nothing)
            #expect(try watch.drain() == MemoryPressureWatch.Drained(byteCount: 0, isEndOfFile: false))

            // Registered with the loop, an idle trigger dispatches nothing.
            let loop = try EventLoop()
            defer { loop.cancelAllSources() }
            var seen: [IOEvents] = []
            try loop.addIO(fd: watch.fileDescriptor, events: watch.events, name: "memory-pressure") { _, events in
                seen.append(events)
            }
            #expect(try !loop.runIteration(timeout: .zero))
            #expect(seen.isEmpty)

            // The cgroup removed under the watch: POLLERR (with POLLPRI) on every poll, which must end the watch.
            loop.cancelAllSources()
            scratch.close()
            let events = try watch.fileDescriptor.poll(for: watch.events, timeout: .seconds(10))
            #expect(events.contains(.error), "\(events)")
            #expect(try watch.acknowledge(events) == .ended)
        }
    }

    @Test(
        "cgroup2: the environment a launched app gets opens a PSI watch with systemd's default trigger",
        .requires(.cgroup(.unified)))
    func scratchCgroupFromEnvironment() async throws {
        try await offThePool {
            let scratch = try ScratchCgroup(.unified)
            defer { scratch.close() }
            let result = try MemoryPressureWatch.fromEnvironment(MemoryPressureWatch.environment(for: scratch.cgroup))
            guard case .watching(let watch) = result else {
                Issue.record("not watching: \(String(describing: result))")
                return
            }
            defer { try? watch.close() }
            #expect(watch.kind == .psi)
            #expect(watch.trigger == .systemdDefault)
            #expect(try watch.fileDescriptor.poll(for: watch.events, timeout: .zero).isEmpty)

            // Without MEMORY_PRESSURE_WRITE a PSI file still gets a trigger: without one it would report POLLERR.
            let bare = try MemoryPressureWatch.open(path: scratch.cgroup.path + "/memory.pressure", write: nil)
            defer { try? bare.close() }
            #expect(bare.trigger == .systemdDefault)
            #expect(try bare.fileDescriptor.poll(for: bare.events, timeout: .zero).isEmpty)

            // A trigger's text without its NUL is armed as the text says (the kernel would drop the last digit).
            let unterminated = try MemoryPressureWatch.open(
                path: scratch.cgroup.path + "/memory.pressure", write: Array("some 150000 2000000".utf8))
            defer { try? unterminated.close() }
            #expect(unterminated.trigger?.kernelText == "some 150000 2000000")
        }
    }

    @Test(
        "cgroup2: a window the kernel refuses is widened to 2 s, and the watch says which trigger it armed",
        .requires(.cgroup(.unified)))
    func scratchCgroupWindowFallback() async throws {
        try await offThePool {
            let scratch = try ScratchCgroup(.unified)
            defer { scratch.close() }
            let path = scratch.cgroup.path + "/memory.pressure"
            let asked = MemoryPressureTrigger(kind: .some, stall: .milliseconds(150), window: .milliseconds(500))
            // What the kernel says of the exact window decides what the fallback must do.
            var isRefused = false
            do throws(Errno) {
                try asked.arm(atPath: path).close()
            } catch {
                #expect(error == .invalidArgument, "\(error)")
                isRefused = true
            }
            let expected = isRefused ? asked.withUnprivilegedWindow : asked
            #expect(expected.window == (isRefused ? .seconds(2) : .milliseconds(500)))

            let watch = try MemoryPressureWatch.armPSI(path: path, trigger: asked)
            defer { try? watch.close() }
            #expect(watch.trigger == expected)
            #expect(try watch.fileDescriptor.poll(for: watch.events, timeout: .zero).isEmpty)

            // The protocol's path takes the same fallback for bytes that are a trigger's text.
            let opened = try MemoryPressureWatch.open(path: path, write: asked.kernelBytes)
            defer { try? opened.close() }
            #expect(opened.trigger == expected)

            if isRefused {
                let error = watchError {
                    _ = try MemoryPressureWatch.armPSI(path: path, trigger: asked, fallback: .none)
                }
                #expect(error?.path == path)
                #expect(error?.errno == .invalidArgument)
            }
            // A stall longer than any window the kernel takes is refused even after widening; the error says both.
            let impossible = MemoryPressureTrigger(kind: .some, stall: .seconds(11), window: .seconds(11))
            let error = watchError { _ = try MemoryPressureWatch.armPSI(path: path, trigger: impossible) }
            #expect(error?.errno == .invalidArgument)
            #expect(error?.description.contains("some 11000000 12000000") == true, "\(String(describing: error))")
            #expect(error?.description.contains("some 11000000 11000000") == true, "\(String(describing: error))")
        }
    }

    @Test(
        "/proc/pressure/memory: a 500 ms window is taken or refused as the kernel says, the refusal typed",
        .requires(.systemPressure))
    func systemPressureWindow() async throws {
        try await offThePool {
            let path = "/proc/pressure/memory"
            let asked = MemoryPressureTrigger(kind: .some, stall: .milliseconds(150), window: .milliseconds(500))
            // Without CAP_SYS_RESOURCE (root lacks it on the build hosts) the kernel refuses it with EINVAL; with
            // it, the kernel takes it.
            var exact: MemoryPressureWatchError?
            do throws(MemoryPressureWatchError) {
                let watch = try MemoryPressureWatch.armPSI(path: path, trigger: asked, fallback: .none)
                try? watch.close()
            } catch {
                exact = error
            }
            if let exact {
                #expect(exact.path == path)
                #expect(exact.errno == .invalidArgument, "\(exact)")
                #expect(exact.description.contains(path), "\(exact)")
                #expect(exact.description.contains("some 150000 500000"), "\(exact)")
            }
            let watch = try MemoryPressureWatch.armPSI(path: path, trigger: asked)
            defer { try? watch.close() }
            #expect(watch.trigger == (exact == nil ? asked : asked.withUnprivilegedWindow))
            #expect(watch.kind == .psi)
        }
    }

    @Test(
        "cgroup2: a trigger fires (POLLPRI) when a cgroup-limited reader thrashes its page cache",
        .requires(.cgroup(.unified), .cgroup(.memory)))
    func scratchCgroupTriggerFires() async throws {
        try await offThePool {
            try withTemporaryDirectory { directory in
                // The stall: a reader of a 48 MiB file limited to 32 MiB of memory (v1, since cgroup2 here has no
                // memory controller) refaults pages it just read; PSI charges that to its cgroup2 cgroup. Bounded: the file's size, the limit,
                // the reader's own 60 s alarm, and its kill when the test ends.
                let file = directory.path + "/pages"
                let writer = try FileDescriptor.open(file, .writeOnly, options: [.create, .truncate])
                try writer.closeAfter {
                    let chunk = [UInt8](repeating: 0x5A, count: 1 << 20)
                    for _ in 0..<48 { try writer.writeAll(chunk) }
                    #expect(fsync(writer.rawValue) == 0)
                    // Out of the page cache: otherwise the pages stay charged to the test's own memory cgroup and
                    // the reader finds them there, stall-free.
                    #expect(posix_fadvise(writer.rawValue, 0, 0, POSIX_FADV_DONTNEED) == 0)
                }
                let unified = try ScratchCgroup(.unified)
                defer { unified.close() }
                let memory = try ScratchCgroup(.memory)
                defer { memory.close() }
                try memory.cgroup.write("memory.limit_in_bytes", "\(32 << 20)")

                // 20 ms of stall in 2 s: how much the reader stalls depends on the storage under the file (here
                // from 1% to over 10% of the time, from one machine to another), so the threshold is low.
                let trigger = MemoryPressureTrigger(kind: .some, stall: .milliseconds(20), window: .seconds(2))
                let watch = try MemoryPressureWatch.armPSI(
                    path: unified.cgroup.path + "/memory.pressure", trigger: trigger)
                defer { try? watch.close() }
                #expect(try watch.fileDescriptor.poll(for: watch.events, timeout: .zero).isEmpty)

                let script = """
                    import os, signal, sys
                    signal.alarm(60)
                    print("ready", flush=True)
                    sys.stdin.readline()
                    while True:
                        f = os.open(sys.argv[1], os.O_RDONLY)
                        while os.read(f, 1 << 20): pass
                        os.close(f)
                    """
                let reader = try ChildProcess([python, "-c", script, file])
                defer { reader.terminate() }
                _ = try reader.waitForLine(startingWith: "ready")
                try unified.move(reader.pid)
                try memory.move(reader.pid)
                try reader.send("go")

                // Wide margin: it fires ~2 s after the stall starts here.
                let events = try watch.fileDescriptor.poll(for: watch.events, timeout: .seconds(30))
                let pressure = (try? unified.cgroup.read("memory.pressure")) ?? "unreadable"
                #expect(events.contains(.priority), "no trigger in 30 s; memory.pressure: \(pressure)")
                #expect(try watch.acknowledge(events) == .pressure)
            }
        }
    }

    // MARK: FIFOs

    @Test("FIFO: a write to it is POLLIN, drained to nothing, and a writer that leaves does not spin the loop")
    func fifoWatch() async throws {
        try await offThePool {
            try withTemporaryDirectory { directory in
                let path = directory.path + "/pressure.fifo"
                #expect(mkfifo(path, 0o600) == 0)
                let watch = try MemoryPressureWatch.open(path: path, write: nil)
                defer { try? watch.close() }
                #expect(watch.kind == .fifo)
                #expect(watch.events == .readable)
                #expect(watch.trigger == nil)
                #expect(watch.description == "fifo \(path)")
                #expect(try watch.fileDescriptor.poll(for: watch.events, timeout: .zero).isEmpty)

                let writer = try FileDescriptor.open(path, .writeOnly, options: [.nonBlocking])
                try writer.closeAfter { try writer.writeAll(Array("pressure\n".utf8)) }
                let events = try watch.fileDescriptor.poll(for: watch.events, timeout: .seconds(10))
                #expect(events == .readable, "\(events)")
                #expect(try watch.acknowledge(events) == .pressure)
                // Drained, and no hang-up though the writer left: the next poll finds nothing.
                #expect(try watch.fileDescriptor.poll(for: watch.events, timeout: .zero).isEmpty)
                #expect(try watch.drain() == MemoryPressureWatch.Drained(byteCount: 0, isEndOfFile: false))
            }
        }
    }

    @Test("FIFO: in the loop, one write is one pressure event; the watch's own bytes are not taken for one")
    func fifoInTheLoop() async throws {
        try await offThePool {
            try withTemporaryDirectory { directory in
                let path = directory.path + "/pressure.fifo"
                #expect(mkfifo(path, 0o600) == 0)
                let watch = try MemoryPressureWatch.open(path: path, write: Array("hello".utf8))
                defer { try? watch.close() }
                #expect(try watch.fileDescriptor.poll(for: watch.events, timeout: .zero).isEmpty)

                let loop = try EventLoop()
                defer { loop.cancelAllSources() }
                var acknowledgements: [MemoryPressureWatch.Acknowledgement] = []
                try loop.addIO(fd: watch.fileDescriptor, events: watch.events, name: "memory-pressure") { _, events in
                    acknowledgements.append((try? watch.acknowledge(events)) ?? .ended)
                }
                #expect(try !loop.runIteration(timeout: .zero))
                let writer = try FileDescriptor.open(path, .writeOnly, options: [.nonBlocking])
                try writer.closeAfter { try writer.writeAll([1]) }
                #expect(try loop.runIteration(timeout: .seconds(10)))
                #expect(acknowledgements == [.pressure])
                #expect(try !loop.runIteration(timeout: .zero))
            }
        }
    }

    // MARK: Sockets

    @Test("socket: the watch connects, sends exactly the decoded MEMORY_PRESSURE_WRITE, and hears pressure")
    func streamSocketWatch() async throws {
        try await offThePool {
            try withTemporaryDirectory { directory in
                let path = directory.path + "/pressure.sock"
                let listener = try listeningSocket(path, type: SOCK_STREAM)
                defer { try? listener.close() }
                let custom = Base64.encode([0, 1, 2, 0xFF] + Array("note".utf8) + [0])
                for write in [systemdDefaultWrite, custom] {
                    let result = try MemoryPressureWatch.fromEnvironment([
                        "MEMORY_PRESSURE_WATCH": path, "MEMORY_PRESSURE_WRITE": write,
                    ])
                    guard case .watching(let watch) = result else {
                        Issue.record("not watching: \(String(describing: result))")
                        return
                    }
                    defer { try? watch.close() }
                    #expect(watch.kind == .socket)
                    #expect(watch.events == .readable)
                    #expect(watch.description == "socket \(path)")
                    #expect(try watch.fileDescriptor.isNonBlocking)

                    let server = try acceptConnection(listener)
                    var isServerOpen = true
                    defer { if isServerOpen { try? server.close() } }
                    let expected = try Base64.decode(write)
                    #expect(try readExactly(expected.count, from: server) == expected)
                    #expect(try server.poll(for: .readable, timeout: .zero).isEmpty, "more than the bytes arrived")

                    #expect(try watch.fileDescriptor.poll(for: watch.events, timeout: .zero).isEmpty)
                    try server.writeAll(Array("pressure".utf8))
                    let events = try watch.fileDescriptor.poll(for: watch.events, timeout: .seconds(10))
                    #expect(try watch.acknowledge(events) == .pressure)
                    #expect(try watch.fileDescriptor.poll(for: watch.events, timeout: .zero).isEmpty)

                    // The peer leaving ends the watch: it would otherwise be readable forever.
                    isServerOpen = false
                    try server.close()
                    let hangUp = try watch.fileDescriptor.poll(for: watch.events, timeout: .seconds(10))
                    #expect(try watch.acknowledge(hangUp) == .ended)
                }
            }
        }
    }

    @Test("socket: a SOCK_SEQPACKET listener is connected with SOCK_SEQPACKET and gets the bytes as one message")
    func sequencedPacketSocketWatch() async throws {
        try await offThePool {
            try withTemporaryDirectory { directory in
                let path = directory.path + "/pressure.seqpacket"
                let listener = try listeningSocket(path, type: SOCK_SEQPACKET)
                defer { try? listener.close() }
                let bytes = MemoryPressureTrigger.systemdDefault.kernelBytes
                let watch = try MemoryPressureWatch.open(path: path, write: bytes)
                defer { try? watch.close() }
                #expect(watch.kind == .socket)
                let server = try acceptConnection(listener)
                var isServerOpen = true
                defer { if isServerOpen { try? server.close() } }
                #expect(try !server.poll(for: .readable, timeout: .seconds(10)).isEmpty)
                #expect(try server.read(upTo: 4096) == bytes)

                // Empty messages are readable but carry nothing: not pressure, and not the end either. A drain takes
                // a bounded number of them, so a flood of them cannot hold the loop; the next drain takes the rest.
                for _ in 0..<20 { #expect(send(server.rawValue, nil, 0, 0) == 0) }
                let empty = try watch.fileDescriptor.poll(for: watch.events, timeout: .seconds(10))
                #expect(try watch.acknowledge(empty) == .nothing)
                #expect(try watch.fileDescriptor.poll(for: watch.events, timeout: .zero) == .readable)
                #expect(try watch.acknowledge(empty) == .nothing)
                #expect(try watch.fileDescriptor.poll(for: watch.events, timeout: .zero).isEmpty)

                try server.writeAll([7])
                let events = try watch.fileDescriptor.poll(for: watch.events, timeout: .seconds(10))
                #expect(try watch.acknowledge(events) == .pressure)
                isServerOpen = false
                try server.close()
                let hangUp = try watch.fileDescriptor.poll(for: watch.events, timeout: .seconds(10))
                #expect(try watch.acknowledge(hangUp) == .ended)
            }
        }
    }

    @Test("socket: nobody listening is a typed error naming the path")
    func socketWithoutListener() async throws {
        try await offThePool {
            try withTemporaryDirectory { directory in
                let path = directory.path + "/stale.sock"
                // A socket file nobody listens on: bound, never listening (a listener closed at once could still
                // take the connection, through the copy a child spawned by a concurrent test holds until its exec).
                let bound = try listeningSocket(path, type: SOCK_STREAM, listens: false)
                defer { try? bound.close() }
                let error = watchError { _ = try MemoryPressureWatch.open(path: path, write: [1]) }
                #expect(error?.path == path)
                #expect(error?.errno == .connectionRefused)
                #expect(error?.description.contains(path) == true)
            }
        }
    }
}
