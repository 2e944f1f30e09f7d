// `bgtask-bench ipc`: lease round trips through the real daemon, next to a raw Unix-socket ping-pong.

import BGTaskBenchmarks
import BGTaskPOSIX
import BGTaskSystem
import Foundation
import Glibc
import Synchronization

/// Measures `BeginBackgroundTask` + `EndBackgroundTask` against a private `bgtaskd` with 1, 16 and 64
/// concurrent clients, and, in the same run, a raw ping-pong of the same message sizes against an echo server
/// on the same kind of event loop (sd-event, non-blocking sockets) with no JSON and no policy: the floor a
/// lease round trip cannot beat on this machine. Reported as calls per second, begin+end pairs per second, and
/// p50/p99 latency per call; the ratio of the p50s is the daemon's own cost.
struct IPCBenchmark {
    var clientCounts = [1, 16, 64]
    /// Begin+end pairs per client per measurement.
    var pairsPerClient = 2_000

    /// One measurement.
    struct Result {
        var calls: Int
        var seconds: Double
        var latenciesNanoseconds: [Int64]

        var callsPerSecond: Double { Double(calls) / seconds }
        func percentile(_ fraction: Double) -> Double {
            let sorted = latenciesNanoseconds.sorted()
            guard !sorted.isEmpty else { return 0 }
            return Double(sorted[min(sorted.count - 1, Int(Double(sorted.count) * fraction))]) / 1000
        }
    }

    /// One client count measured against both servers.
    struct Comparison {
        /// Concurrent clients.
        var clients: Int
        /// The raw ping-pong of the same sizes.
        var raw: Result
        /// Lease begin+end through bgtaskd.
        var daemon: Result
    }

    /// What `run()` measured, and the lines it prints.
    struct Report {
        /// One per client count, in the order of `clientCounts`.
        var comparisons: [Comparison]
        /// The table, the ratios and the note.
        var lines: [String]
    }

    func run() throws -> Report {
        let directory = try makeScratchDirectory(prefix: "bgtask-bench")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // Room for 64 clients' leases and connections; the default policy otherwise.
        let daemon = try BenchmarkDaemon(
            executable: try sibling("bgtaskd"), directory: directory,
            configuration: "[Limits]\nConnectionsPerUserMax=1024\n", lifetime: .seconds(600))
        defer { daemon.stop() }
        let echo = try EchoServerProcess(directory: directory)
        defer { echo.stop() }

        var lines = [
            "clients  server   calls/s   pairs/s   p50 µs   p99 µs"
        ]
        var ratios: [String] = []
        var comparisons: [Comparison] = []
        for clients in clientCounts {
            let raw = try measure(clients: clients, socket: echo.socketPath, registerWith: nil)
            let lease = try measure(clients: clients, socket: daemon.socketPath, registerWith: daemon.socketPath)
            comparisons.append(Comparison(clients: clients, raw: raw, daemon: lease))
            for (name, result) in [("raw", raw), ("bgtaskd", lease)] {
                lines.append(
                    pad(String(clients), 7) + "  " + name.padding(toLength: 7, withPad: " ", startingAt: 0)
                        + pad(format(result.callsPerSecond), 10) + pad(format(result.callsPerSecond / 2), 10)
                        + pad(format(result.percentile(0.5)), 9) + pad(format(result.percentile(0.99)), 9))
            }
            ratios.append(
                "\(clients) client(s): p50 \(format(lease.percentile(0.5) / raw.percentile(0.5)))x raw, "
                    + "p99 \(format(lease.percentile(0.99) / raw.percentile(0.99)))x raw")
        }
        let notes = [
            "bgtaskd saved its state in \(daemon.stateDirectory)"
                + (BenchmarkDaemon.memoryFileSystem == nil
                    ? " (no memory filesystem here: a service's /run is one, so calls there cost less)"
                    : " (a memory filesystem, as a service's /run is)")
        ]
        return Report(
            comparisons: comparisons,
            lines: lines + ["bgtaskd vs raw ping-pong of the same sizes (same run):"] + ratios.map { "  " + $0 } + notes
        )
    }

    /// Runs `clients` threads, each doing `pairsPerClient` begin+end pairs (or the same bytes against the echo
    /// server), and gathers every call's latency.
    private func measure(clients: Int, socket: String, registerWith daemonSocket: String?) throws -> Result {
        var connections: [FileDescriptor] = []
        var registrations: [FileDescriptor] = []
        defer {
            for descriptor in connections + registrations { try? descriptor.close() }
        }
        for index in 0..<clients {
            let app = "bench-\(clients)-\(index)"
            if let daemonSocket {
                let registration = try UnixSocket.connect(path: daemonSocket)
                try registration.sendAll(
                    Array(
                        #"{"method":"io.bgtask.Lifecycle.Register","parameters":{"name":"\#(app)"},"more":true}"#.utf8)
                        + [0])
                _ = try readFrame(registration)
                registrations.append(registration)
            }
            connections.append(try UnixSocket.connect(path: socket))
        }
        let latencies = Mutex<[Int64]>([])
        let failure = Mutex<String?>(nil)
        let finished = DispatchGroup()
        var threads: [Thread] = []
        for (index, connection) in connections.enumerated() {
            let app = "bench-\(clients)-\(index)"
            let pairs = pairsPerClient
            let begin =
                Array(
                    #"{"method":"io.bgtask.Lifecycle.BeginBackgroundTask","parameters":{"app":"\#(app)","name":null}}"#
                        .utf8) + [0]
            finished.enter()
            let thread = Thread {
                defer { finished.leave() }
                var mine: [Int64] = []
                mine.reserveCapacity(pairs * 2)
                do {
                    for _ in 0..<pairs {
                        var sent = MonotonicClock.now()
                        try connection.sendAll(begin)
                        let reply = try readFrame(connection)
                        mine.append(MonotonicClock.now() - sent)
                        guard let task = taskID(in: reply) else {
                            throw BenchError("unexpected reply: \(String(decoding: reply, as: UTF8.self))")
                        }
                        let end =
                            Array(
                                #"{"method":"io.bgtask.Lifecycle.EndBackgroundTask","parameters":{"app":"\#(app)","taskId":\#(task)}}"#
                                    .utf8) + [0]
                        sent = MonotonicClock.now()
                        try connection.sendAll(end)
                        _ = try readFrame(connection)
                        mine.append(MonotonicClock.now() - sent)
                    }
                } catch {
                    failure.withLock { $0 = "\(error)" }
                }
                latencies.withLock { $0 += mine }
            }
            threads.append(thread)
        }
        let start = MonotonicClock.now()
        for thread in threads { thread.start() }
        finished.wait()
        let seconds = Double(MonotonicClock.now() - start) / 1e9
        if let message = failure.withLock({ $0 }) { throw BenchError("a client failed: \(message)") }
        let all = latencies.withLock { $0 }
        return Result(calls: all.count, seconds: seconds, latenciesNanoseconds: all)
    }
}

/// A failure of the benchmark's own set-up.
struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Reads one NUL-terminated message from a blocking socket (one small message per read in practice).
func readFrame(_ socket: FileDescriptor) throws -> [UInt8] {
    var message: [UInt8] = []
    while true {
        let chunk = try socket.read(upTo: 4096)
        guard !chunk.isEmpty else { throw BenchError("connection closed") }
        if let end = chunk.firstIndex(of: 0) {
            message += chunk[..<end]
            return message
        }
        message += chunk
    }
}

/// The task id in a `BeginBackgroundTask` reply, without a JSON parser on the client side.
func taskID(in reply: [UInt8]) -> Int? {
    let text = String(decoding: reply, as: UTF8.self)
    guard let range = text.range(of: "\"taskId\":") else { return nil }
    return Int(text[range.upperBound...].prefix { $0.isNumber })
}

/// The executable `name` next to this one.
func sibling(_ name: String) throws -> String {
    let me = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
    let path = URL(fileURLWithPath: me).deletingLastPathComponent().appendingPathComponent(name).path
    guard FileManager.default.isExecutableFile(atPath: path) else {
        throw BenchError("\(name) is not built next to bgtask-bench: run `swift build -c release` first")
    }
    return path
}

/// Waits for `READY=1` on a notify socket, at most 30 s.
func waitForReady(_ notify: FileDescriptor, process: SpawnedProcess) throws {
    let deadline = MonotonicClock.now() + 30_000_000_000
    while MonotonicClock.now() < deadline {
        if try notify.poll(for: .readable, timeout: .milliseconds(100)).contains(.readable),
            String(decoding: try notify.read(upTo: 4096), as: UTF8.self).contains("READY=1")
        {
            return
        }
        if try process.pidFD.hasExited { throw BenchError("the server exited before it was ready") }
    }
    throw BenchError("the server was not ready within 30 s")
}

/// The raw echo server: this executable in `ipc-echo-server` mode, in its own process.
final class EchoServerProcess {
    let socketPath: String
    private let process: SpawnedProcess

    init(directory: String) throws {
        socketPath = directory + "/echo.sock"
        let notifyPath = directory + "/echo.notify"
        let notify = try UnixSocket.bindDatagram(path: notifyPath)
        defer { try? notify.close() }
        var options = SpawnOptions(flags: .newProcessGroup)
        options.environment = ["NOTIFY_SOCKET=\(notifyPath)"]
        process = try ProcessSpawner.spawn(
            ["timeout", "600", try sibling("bgtask-bench"), "ipc-echo-server", socketPath], options: options)
        try waitForReady(notify, process: process)
    }

    /// The echo server's own pid (the only child of `timeout`), for pinning its threads. Read from
    /// `/proc/PID/task/PID/children` of `timeout`, which stays this process's unreaped child until `stop()`.
    func serverProcessID(procFS: ProcFS = ProcFS()) throws -> pid_t {
        let path = "\(process.pid)/task/\(process.pid)/children"
        guard let child = try procFS.read(path).split(separator: " ").first.flatMap({ pid_t($0) }) else {
            throw BenchError("no echo server under timeout (pid \(process.pid)) in /proc/\(path)")
        }
        return child
    }

    func stop() {
        try? ProcessGroup(id: process.pid).send(.terminate)
        _ = try? process.waitForExit()
    }
}

/// Serves every connection on `path`: for each NUL-terminated message, a reply of the size the daemon would
/// send (a begin reply to calls naming no task, an end reply otherwise), on an sd-event loop like the daemon's.
func runEchoServer(path: String) throws -> Int32 {
    let loop = try EventLoop()
    let listener = try UnixSocket.listen(path: path)
    let beginReply = Array(#"{"parameters":{"taskId":1000}}"#.utf8) + [0]
    let endReply = Array(#"{"parameters":{}}"#.utf8) + [0]
    var buffers: [Int32: [UInt8]] = [:]
    try loop.addIO(fd: listener, events: .readable) { _, _ in
        while let client = try? UnixSocket.accept(listener) {
            buffers[client.rawValue] = []
            _ = try? loop.addIO(fd: client, events: .readable) { source, _ in
                guard let chunk = try? client.read(upTo: 65536), !chunk.isEmpty else {
                    source.cancel()
                    buffers[client.rawValue] = nil
                    try? client.close()
                    return
                }
                var buffer = (buffers[client.rawValue] ?? []) + chunk
                while let end = buffer.firstIndex(of: 0) {
                    let isEnd =
                        buffer[..<end].count > 0
                        && String(decoding: buffer[..<end], as: UTF8.self)
                            .contains("taskId")
                    buffer.removeSubrange(...end)
                    try? client.sendAll(isEnd ? endReply : beginReply)
                }
                buffers[client.rawValue] = buffer
            }
        }
    }
    try loop.addSignal(.terminate) { _, _ in try? loop.exit(code: 0) }
    _ = try ServiceNotifier().ready()
    return try loop.run()
}
