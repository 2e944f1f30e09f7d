// `bgtask-bench ipc --pin`: one client's round trips to bgtaskd and to a raw echo server, pinned across two CPUs
// and then onto one.

import BGTaskBenchmarks
import BGTaskPOSIX
import Foundation
import Glibc

/// One client against a private `bgtaskd` and against the raw echo server of `bgtask-bench ipc`, in two
/// placements: the client thread on one CPU and every thread of the server on another ("across CPUs"), then
/// both on the same CPU ("same CPU"). Within a placement the two servers take turns round by round, so both pay
/// the same wake-up path and the machine's noise falls on both alike.
///
/// Every latency is one round trip: one request written, its reply read. A lease is two of them
/// (`BeginBackgroundTask`, then `EndBackgroundTask`); the raw server gets the same bytes and answers with replies
/// of the same sizes, so the ratio of the p50s is the daemon's own cost per request.
struct IPCPlacementBenchmark {
    /// Rounds per placement (`--rounds`); in each, `leasesPerRound` leases with one server, then as many with the
    /// other. Twenty gives each server 40,000 round trips per placement in about half a minute for both.
    var rounds = 20
    /// Leases (begin+end pairs) per server per round: 2,000 round trips, under a second per server in a release
    /// build, enough for a p99 of each round, short enough that a burst of noise lands on both servers' turns.
    var leasesPerRound = 1_000
    /// Leases per server when a placement starts, not counted: caches and the scheduler settle on the new CPUs.
    var warmUpLeases = 100

    /// The rounds `--rounds` accepts: at least one, and few enough that the servers' 600 s lifetime is never near.
    static let roundsAllowed = 1...1_000

    /// The benchmark as `ipc`'s options after the mode configure it: `--pin` (required) and `--rounds N`, in any
    /// order, each once; or what is wrong with them.
    static func parse(_ options: [String]) -> Result<IPCPlacementBenchmark, BenchError> {
        var benchmark = IPCPlacementBenchmark()
        var isPinned = false
        var roundsGiven = false
        var remaining = options[...]
        while let option = remaining.popFirst() {
            switch option {
            case "--pin" where !isPinned:
                isPinned = true
            case "--rounds" where !roundsGiven:
                guard let value = remaining.popFirst(), let rounds = Int(value), roundsAllowed.contains(rounds) else {
                    return .failure(BenchError("--rounds takes an integer from 1 to 1000"))
                }
                benchmark.rounds = rounds
                roundsGiven = true
            default:
                return .failure(BenchError("unexpected argument \(option)"))
            }
        }
        guard isPinned else { return .failure(BenchError("--rounds is an option of --pin")) }
        return .success(benchmark)
    }

    /// Where the client and the server under test run.
    enum Placement: CaseIterable {
        /// The client thread on the first CPU this process may use, the server's threads on the second: every
        /// request and reply wakes a thread on the other CPU, as for an app and the daemon on an idle machine.
        case acrossCPUs
        /// Client and server on the first CPU: every round trip is two context switches on that CPU.
        case sameCPU

        /// The placement's name in the table.
        var name: String {
            switch self {
            case .acrossCPUs: "across CPUs"
            case .sameCPU: "same CPU"
            }
        }

        /// The aim for bgtaskd's p50 as a multiple of the raw p50. Across CPUs both wait mostly on the wake-up,
        /// so the daemon's decoding, policy and state save should add at most a quarter; on one CPU that work is
        /// no longer hidden behind the other side's wake-up, and up to three times the raw cost is accepted.
        var aim: Double {
            switch self {
            case .acrossCPUs: 1.25
            case .sameCPU: 3
            }
        }
    }

    /// One placement measured: every round trip's latency per server, sorted.
    struct Measurement {
        /// The CPU the client thread ran on.
        var clientCPU: Int
        /// The CPU every thread of both servers ran on.
        var serverCPU: Int
        /// Round trips to bgtaskd, in nanoseconds, ascending.
        var daemonNanoseconds: [Int64]
        /// Round trips to the raw echo server, in nanoseconds, ascending.
        var rawNanoseconds: [Int64]
        /// bgtaskd's threads pinned in the last pass before a round.
        var daemonThreads: Int
        /// The echo server's threads pinned in the last pass before a round.
        var echoThreads: Int

        /// bgtaskd's p50 as a multiple of the raw p50.
        var ratio: Double {
            percentileMicroseconds(daemonNanoseconds, 0.5) / percentileMicroseconds(rawNanoseconds, 0.5)
        }
    }

    /// What became of one placement.
    enum Outcome {
        /// Measured.
        case measured(Measurement)
        /// Not measured on this machine, and why.
        case unavailable(reason: String)
    }

    /// The private servers and the client's connections to them.
    private struct Servers {
        /// bgtaskd's pid (not `timeout`'s), whose threads are pinned.
        var daemonPID: pid_t
        /// The echo server's pid (not `timeout`'s), whose threads are pinned.
        var echoPID: pid_t
        /// The client's connection to bgtaskd.
        var daemon: LeaseCaller
        /// The client's connection to the echo server.
        var raw: LeaseCaller
    }

    /// What `run()` measured, and the lines it prints.
    struct Report {
        /// One per placement, in `Placement.allCases` order.
        var outcomes: [(Placement, Outcome)]
        /// The table, the verdicts and the notes.
        var lines: [String]
    }

    /// Starts both servers, measures each placement, and returns what came of each with the table, the verdicts
    /// and the notes.
    func run() throws -> Report {
        let allowed = try CPUAffinity.allowedCPUs()
        guard let firstCPU = allowed.numbers.first else { throw BenchError("sched_getaffinity allowed no CPU") }
        let directory = try makeScratchDirectory(prefix: "bgtask-bench")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let daemon = try BenchmarkDaemon(
            executable: try sibling("bgtaskd"), directory: directory, configuration: "", lifetime: .seconds(600))
        defer { daemon.stop() }
        let echo = try EchoServerProcess(directory: directory)
        defer { echo.stop() }

        let app = "bench-pin"
        let registration = try register(app: app, socket: daemon.socketPath)
        defer { try? registration.close() }
        let servers = Servers(
            daemonPID: daemon.pid, echoPID: try echo.serverProcessID(),
            daemon: LeaseCaller(connection: try UnixSocket.connect(path: daemon.socketPath), app: app),
            raw: LeaseCaller(connection: try UnixSocket.connect(path: echo.socketPath), app: app))
        defer {
            try? servers.daemon.connection.close()
            try? servers.raw.connection.close()
        }
        // The client is this thread: back to every CPU it had once the study is done.
        defer { try? CPUAffinity.restrict(thread: 0, to: allowed) }

        var outcomes: [(Placement, Outcome)] = []
        for placement in Placement.allCases {
            switch placement {
            case .acrossCPUs:
                guard let secondCPU = allowed.numbers.dropFirst().first else {
                    let reason = "only CPU \(firstCPU) is allowed to this process (sched_getaffinity)"
                    outcomes.append((placement, .unavailable(reason: reason)))
                    continue
                }
                outcomes.append((placement, .measured(try measure(servers, clientCPU: firstCPU, serverCPU: secondCPU))))
            case .sameCPU:
                outcomes.append((placement, .measured(try measure(servers, clientCPU: firstCPU, serverCPU: firstCPU))))
            }
        }
        return Report(outcomes: outcomes, lines: report(outcomes))
    }

    /// Registers `app` on a connection of its own, kept open for the run (closing it would unregister the app).
    private func register(app: String, socket: String) throws -> FileDescriptor {
        let registration = try UnixSocket.connect(path: socket)
        try registration.sendAll(
            Array(#"{"method":"io.bgtask.Lifecycle.Register","parameters":{"name":"\#(app)"},"more":true}"#.utf8) + [0])
        _ = try readFrame(registration)
        return registration
    }

    /// Pins this thread to `clientCPU` and both servers to `serverCPU`, warms up, then runs the rounds, the
    /// servers taking the lead in turn.
    private func measure(_ servers: Servers, clientCPU: Int, serverCPU: Int) throws -> Measurement {
        try CPUAffinity.restrict(thread: 0, to: CPUSet([clientCPU]))
        var measurement = Measurement(
            clientCPU: clientCPU, serverCPU: serverCPU, daemonNanoseconds: [], rawNanoseconds: [], daemonThreads: 0,
            echoThreads: 0)
        try pinServers(servers, to: serverCPU, recordingIn: &measurement)
        var discarded: [Int64] = []
        try servers.daemon.leases(warmUpLeases, into: &discarded)
        try servers.raw.leases(warmUpLeases, into: &discarded)

        measurement.daemonNanoseconds.reserveCapacity(rounds * leasesPerRound * 2)
        measurement.rawNanoseconds.reserveCapacity(rounds * leasesPerRound * 2)
        for round in 0..<rounds {
            // Again every round: a thread started since the last pass by one not yet pinned could run anywhere.
            try pinServers(servers, to: serverCPU, recordingIn: &measurement)
            if round.isMultiple(of: 2) {
                try servers.daemon.leases(leasesPerRound, into: &measurement.daemonNanoseconds)
                try servers.raw.leases(leasesPerRound, into: &measurement.rawNanoseconds)
            } else {
                try servers.raw.leases(leasesPerRound, into: &measurement.rawNanoseconds)
                try servers.daemon.leases(leasesPerRound, into: &measurement.daemonNanoseconds)
            }
        }
        measurement.daemonNanoseconds.sort()
        measurement.rawNanoseconds.sort()
        return measurement
    }

    /// Pins every thread of both servers to `cpu`, noting how many each has.
    private func pinServers(_ servers: Servers, to cpu: Int, recordingIn measurement: inout Measurement) throws {
        let cpus = CPUSet([cpu])
        do {
            measurement.daemonThreads = try CPUAffinity.restrict(process: servers.daemonPID, to: cpus)
            measurement.echoThreads = try CPUAffinity.restrict(process: servers.echoPID, to: cpus)
        } catch {
            throw BenchError("cannot pin the servers to CPU \(cpu): \(error)")
        }
    }

    /// The table, a verdict per placement, and what was pinned.
    private func report(_ outcomes: [(Placement, Outcome)]) -> [String] {
        var lines = [
            "one client; \(rounds) rounds per placement, each \(leasesPerRound * 2) round trips to bgtaskd and as many"
                + " to the raw echo server (the lead alternating)",
            "µs per round trip: one request and its reply (a lease is two: BeginBackgroundTask, EndBackgroundTask)",
            "placement".padding(toLength: 12, withPad: " ", startingAt: 0) + pad("client", 8) + pad("server", 8)
                + pad("round trips", 13) + pad("bgtaskd p50", 13) + pad("bgtaskd p99", 13) + pad("raw p50", 10)
                + pad("raw p99", 10) + pad("p50 ratio", 11),
        ]
        for (placement, outcome) in outcomes {
            let name = placement.name.padding(toLength: 12, withPad: " ", startingAt: 0)
            switch outcome {
            case .unavailable(let reason):
                lines.append(name + "  not available here: \(reason)")
            case .measured(let measurement):
                lines.append(
                    name + pad(String(measurement.clientCPU), 8) + pad(String(measurement.serverCPU), 8)
                        + pad(String(measurement.daemonNanoseconds.count), 13)
                        + pad(format(percentileMicroseconds(measurement.daemonNanoseconds, 0.5)), 13)
                        + pad(format(percentileMicroseconds(measurement.daemonNanoseconds, 0.99)), 13)
                        + pad(format(percentileMicroseconds(measurement.rawNanoseconds, 0.5)), 10)
                        + pad(format(percentileMicroseconds(measurement.rawNanoseconds, 0.99)), 10)
                        + pad(String(format: "%.2f", measurement.ratio), 11))
            }
        }
        lines += outcomes.map { verdict(for: $0.0, $0.1) }
        for case (let placement, .measured(let measurement)) in outcomes {
            lines.append(
                "\(placement.name): the client thread on CPU \(measurement.clientCPU); bgtaskd's"
                    + " \(measurement.daemonThreads) and the echo server's \(measurement.echoThreads) thread(s) on"
                    + " CPU \(measurement.serverCPU), pinned again before every round")
        }
        lines.append(
            BenchmarkDaemon.memoryFileSystem == nil
                ? "bgtaskd saved its state under $TMPDIR (no memory filesystem here: a service's /run is one, so calls"
                    + " there cost less)"
                : "bgtaskd saved its state on a memory filesystem, as a service's /run is")
        return lines
    }

    /// "PLACEMENT: bgtaskd p50 R x raw: meets|misses the aim (within A x)", or why it was not judged.
    private func verdict(for placement: Placement, _ outcome: Outcome) -> String {
        switch outcome {
        case .unavailable:
            return "\(placement.name): not judged (not measured)"
        case .measured(let measurement):
            let judgement = measurement.ratio <= placement.aim ? "meets" : "misses"
            return "\(placement.name): bgtaskd p50 \(String(format: "%.2f", measurement.ratio))x raw: \(judgement)"
                + " the aim (within \(String(format: "%g", placement.aim))x)"
        }
    }
}

/// One client connection making lease round trips, to bgtaskd or to the echo server (which answers the same
/// bytes with replies of the same sizes).
struct LeaseCaller {
    /// The blocking connection.
    let connection: FileDescriptor
    /// `BeginBackgroundTask` for the app, NUL-terminated.
    let beginMessage: [UInt8]
    /// The app the leases are for.
    let app: String

    /// A caller of `app`'s leases on `connection`.
    init(connection: FileDescriptor, app: String) {
        self.connection = connection
        self.app = app
        beginMessage = Self.beginMessage(app: app)
    }

    /// `BeginBackgroundTask` of an unnamed lease for `app`, NUL-terminated.
    static func beginMessage(app: String) -> [UInt8] {
        frame(#"{"method":"io.bgtask.Lifecycle.BeginBackgroundTask","parameters":{"app":"\#(app)","name":null}}"#)
    }

    /// Makes `pairs` leases, each a begin and an end round trip, and appends each round trip's latency in
    /// nanoseconds to `latencies`.
    func leases(_ pairs: Int, into latencies: inout [Int64]) throws {
        for _ in 0..<pairs {
            let reply = try roundTrip(beginMessage, into: &latencies)
            guard let task = taskID(in: reply) else {
                throw BenchError("unexpected reply: \(String(decoding: reply, as: UTF8.self))")
            }
            _ = try roundTrip(endMessage(task: task), into: &latencies)
        }
    }

    /// Sends `message`, reads the reply, appends the time between in nanoseconds to `latencies`, and returns the
    /// reply.
    private func roundTrip(_ message: [UInt8], into latencies: inout [Int64]) throws -> [UInt8] {
        let sent = MonotonicClock.now()
        try connection.sendAll(message)
        let reply = try readFrame(connection)
        latencies.append(MonotonicClock.now() - sent)
        return reply
    }

    /// `EndBackgroundTask` of `task`, NUL-terminated.
    private func endMessage(task: Int) -> [UInt8] {
        Self.frame(
            #"{"method":"io.bgtask.Lifecycle.EndBackgroundTask","parameters":{"app":"\#(app)","taskId":\#(task)}}"#)
    }

    /// `json` as a Varlink message: its UTF-8 bytes and the terminating NUL.
    private static func frame(_ json: String) -> [UInt8] { Array(json.utf8) + [0] }
}

/// The latency at `fraction` (0.5: the median) of `sorted` nanoseconds, in microseconds; 0 when empty.
func percentileMicroseconds(_ sorted: [Int64], _ fraction: Double) -> Double {
    guard !sorted.isEmpty else { return 0 }
    return Double(sorted[min(sorted.count - 1, Int(Double(sorted.count) * fraction))]) / 1000
}
