// The launched apps of the reclaim benchmark: a suspended victim of known size, and the foreground app that grows.

import BGTaskClient
import BGTaskPOSIX
import BGTaskProtocol
import Foundation
import Glibc

/// The hidden `reclaim-app` mode: the process `bgtaskd` launches for the reclaim benchmark (`Launch` with this
/// executable as the program), in one of two roles.
///
/// - The **victim** maps and touches its allocation, registers in background and acknowledges
///   `didEnterBackground`, so the daemon suspends it at once, holding a known amount of memory.
/// - The **trigger** registers in the foreground and connects to the benchmark's control socket, whose path it is
///   given; there it maps and touches memory when told (`touch BYTES [MARK]`), answering with `CLOCK_MONOTONIC`
///   just before the first page, right after the page that holds byte MARK (the one that takes the apps over the
///   limit) and right after the last page, and unmaps all of it when told (`release`).
///
/// Both bound their own lifetime with `alarm`, and both exit when the daemon ends their registration. Their output
/// goes where the daemon puts a launched app's output (`--log-dir`), or, launched as a unit whose output goes to the
/// journal, to the file `--log` names: one line per step, for a failing run's report.
public enum ReclaimApp {
    /// What the launched app does.
    public enum Role: String, Sendable {
        /// Suspended, holding its allocation.
        case victim
        /// In the foreground, growing on the benchmark's command.
        case trigger
    }

    /// The hidden mode's options: `--role victim|trigger`, `--alloc-mib N` (the victim's allocation),
    /// `--control PATH` (the trigger's control socket), `--lifetime SECONDS` and `--log PATH`.
    public struct Options: Sendable {
        /// What the app does.
        public var role: Role
        /// The victim's allocation in bytes (whole MiB on the command line); 0 for the trigger.
        public var allocationBytes: Int
        /// The benchmark's control socket, which the trigger connects to.
        public var controlPath: String?
        /// The `alarm` the app sets first: it never outlives this.
        public var lifetimeSeconds: UInt32
        /// A file the app appends its output to, instead of the standard output and error it was given.
        public var logPath: String?

        /// Parses the arguments after the mode's name; nil when they are not a valid set.
        public init?(arguments: [String]) {
            var values: [String: String] = [:]
            var remaining = arguments[...]
            while let option = remaining.popFirst() {
                guard ["--role", "--alloc-mib", "--control", "--lifetime", "--log"].contains(option),
                    values[option] == nil, let value = remaining.popFirst()
                else { return nil }
                values[option] = value
            }
            guard let role = values["--role"].flatMap(Role.init(rawValue:)),
                let lifetime = values["--lifetime"].flatMap({ UInt32($0) }), lifetime > 0,
                let mebibytes = values["--alloc-mib"].map({ Int($0) }) ?? 0, (0...(1 << 20)).contains(mebibytes)
            else { return nil }
            self.role = role
            lifetimeSeconds = lifetime
            allocationBytes = mebibytes << 20
            controlPath = values["--control"]
            logPath = values["--log"]
            // A victim holds memory; a trigger is told what to touch over its control socket.
            switch role {
            case .victim: if allocationBytes == 0 { return nil }
            case .trigger: if controlPath == nil { return nil }
            }
        }

        /// The arguments that give these options, for the `Launch` call.
        static func arguments(
            role: Role, allocationBytes: Int = 0, controlPath: String? = nil, lifetime: Duration,
            logPath: String? = nil
        ) -> [String] {
            var arguments = ["reclaim-app", "--role", role.rawValue, "--lifetime", "\(lifetime.components.seconds)"]
            if allocationBytes > 0 { arguments += ["--alloc-mib", "\(allocationBytes >> 20)"] }
            if let controlPath { arguments += ["--control", controlPath] }
            if let logPath { arguments += ["--log", logPath] }
            return arguments
        }
    }

    /// Runs the app; returns the exit status.
    public static func run(_ options: Options) -> Int32 {
        alarm(options.lifetimeSeconds)
        if let logPath = options.logPath {
            do {
                let log = try FileDescriptor.open(
                    logPath, .writeOnly, options: [.create, .append], permissions: 0o644)
                try log.duplicate(onto: .standardOutput)
                try log.duplicate(onto: .standardError)
                try log.close()
            } catch {
                say("reclaim-app: cannot write to \(logPath): \(error)")
                return 1
            }
        }
        let environment = ProcessInfo.processInfo.environment
        guard let socketPath = environment["BGTASK_SOCKET"], let name = environment["BGTASK_APP_NAME"] else {
            say("reclaim-app: BGTASK_SOCKET and BGTASK_APP_NAME are not set: bgtaskd did not launch this process")
            return 64
        }
        do {
            switch options.role {
            case .victim:
                try runVictim(name: name, socketPath: socketPath, allocationBytes: options.allocationBytes)
            case .trigger:
                // Validated by Options: a trigger always has a control path.
                try runTrigger(name: name, socketPath: socketPath, controlPath: options.controlPath ?? "")
            }
            return 0
        } catch {
            say("reclaim-app \(name): \(error)")
            return 1
        }
    }

    /// Touches its allocation, registers in background and acknowledges `didEnterBackground`; then waits, suspended,
    /// until the daemon kills it or ends its registration.
    private static func runVictim(name: String, socketPath: String, allocationBytes: Int) throws {
        _ = try TouchedMemory(bytes: allocationBytes)
        say("allocated \(allocationBytes) bytes")
        let client = try LifecycleClient(socketPath: socketPath, timeout: .seconds(10))
        defer { client.close() }
        let registration = try client.register(name: name, state: .background)
        defer { registration.close() }
        say("registered \(registration.app.state.rawValue)")
        while let event = try registration.nextEvent() {
            guard event.kind == .didEnterBackground else { continue }
            try client.acknowledge(app: name, eventId: event.id)
            say("acknowledged didEnterBackground")
        }
        say("registration ended")
    }

    /// Registers in the foreground, then serves the benchmark's commands until the control socket closes.
    private static func runTrigger(name: String, socketPath: String, controlPath: String) throws {
        let client = try LifecycleClient(socketPath: socketPath, timeout: .seconds(10))
        defer { client.close() }
        let registration = try client.register(name: name, state: .active)
        defer { registration.close() }
        say("registered \(registration.app.state.rawValue)")
        // Events (memory warnings) are read and dropped; the registration's end ends the app.
        let reader = Thread {
            while (try? registration.nextEvent()) != nil {}
            say("registration ended")
            exit(0)
        }
        reader.start()
        let control = LineChannel(try UnixSocket.connect(path: controlPath))
        defer { control.close() }
        try control.send("ready \(getpid())")
        var chunks: [TouchedMemory] = []
        while let command = try control.nextLine(timeout: nil) {
            let words = command.split(separator: " ")
            switch (words.first, words.count) {
            case ("touch", 2), ("touch", 3):
                guard let bytes = Int(words[1]), bytes > 0 else { throw BenchmarkError("bad command \(command)") }
                let mark = words.count == 3 ? Int(words[2]) : bytes
                guard let mark, (1...bytes).contains(mark) else { throw BenchmarkError("bad command \(command)") }
                let start = MonotonicClock.now()
                let chunk = try TouchedMemory(bytes: bytes, markAfter: mark)
                let end = MonotonicClock.now()
                chunks.append(chunk)
                try control.send("touched \(start) \(chunk.markedAt) \(end)")
            case ("release", 1):
                for chunk in chunks { chunk.unmap() }
                chunks = []
                try control.send("released")
            default:
                throw BenchmarkError("unknown command \(command)")
            }
        }
        say("control socket closed")
    }

    /// Writes `line` to standard output (the app's log); nothing is left to report a failing write to.
    private static func say(_ line: String) {
        try? FileDescriptor.standardOutput.writeAll(Array((line + "\n").utf8))
    }
}

/// Anonymous memory mapped for the app alone and written a byte per page, so every page is resident and charged
/// to it (no transparent huge page is asked for: the total grows a page at a time).
struct TouchedMemory {
    let address: UnsafeMutableRawPointer
    let bytes: Int
    /// `CLOCK_MONOTONIC` read right after the page holding byte `markAfter - 1` was touched, in order from the first
    /// page: the moment the first `markAfter` bytes were resident.
    let markedAt: Int64

    /// Maps `bytes` (rounded up to pages) and touches every page, reading the clock once the first `markAfter`
    /// bytes are touched (by default, all of them).
    init(bytes: Int, markAfter: Int? = nil) throws {
        let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))
        let length = (bytes + pageSize - 1) / pageSize * pageSize
        guard
            let mapped = mmap(nil, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
            mapped != MAP_FAILED
        else {
            throw BenchmarkError("mmap of \(length) bytes failed: \(Errno(rawValue: errno, operation: "mmap"))")
        }
        // The page holding byte mark - 1 starts at or after this offset's page.
        let markPage = (max(1, markAfter ?? length) - 1) / pageSize * pageSize
        var markedAt: Int64 = 0
        for offset in stride(from: 0, to: length, by: pageSize) {
            mapped.storeBytes(of: 1, toByteOffset: offset, as: UInt8.self)
            if offset == markPage { markedAt = MonotonicClock.now() }
        }
        self.markedAt = markedAt
        address = mapped
        self.bytes = length
    }

    /// Gives the memory back to the kernel.
    func unmap() {
        // munmap of a whole mapping this value made fails only for invalid arguments.
        munmap(address, bytes)
    }
}

/// Lines over a connected stream socket, each read bounded: the reclaim benchmark's control channel.
final class LineChannel {
    private let socket: FileDescriptor
    private var buffer: [UInt8] = []

    /// Takes over `socket` (blocking or not: reads wait in `poll`).
    init(_ socket: FileDescriptor) {
        self.socket = socket
    }

    /// Sends `line` and a newline.
    func send(_ line: String) throws {
        try socket.writeAll(Array((line + "\n").utf8))
    }

    /// The next line, waiting at most `timeout` (nil: no limit); nil once the peer closed the connection.
    func nextLine(timeout: Duration?) throws -> String? {
        let deadline = timeout.map { MonotonicClock.now() + $0.nanosecondCount }
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: buffer[..<newline], as: UTF8.self)
                buffer.removeSubrange(...newline)
                return line
            }
            let remaining = deadline.map { max(0, $0 - MonotonicClock.now()) }
            if let remaining, remaining == 0 {
                throw BenchmarkError("no reply within \(timeout ?? .zero)")
            }
            guard try !socket.poll(for: .readable, timeout: remaining.map { .nanoseconds($0) }).isEmpty else {
                continue
            }
            guard let chunk = try readAvailable() else { continue }
            if chunk.isEmpty { return nil }
            buffer += chunk
        }
    }

    /// What one read gives: empty at the end of the stream, nil when nothing was there after all (`EAGAIN` on a
    /// non-blocking socket).
    private func readAvailable() throws(Errno) -> [UInt8]? {
        do {
            return try socket.read(upTo: 4096)
        } catch {
            if error == .wouldBlock { return nil }
            throw error
        }
    }

    /// Closes the connection.
    func close() {
        try? socket.close()
    }
}
