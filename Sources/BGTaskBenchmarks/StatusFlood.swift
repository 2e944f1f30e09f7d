// Status calls from another user during the deadline benchmark: GetStatus, ListApps and History in a loop.

import BGTaskPOSIX
import BGTaskProtocol
import Foundation
import Glibc

/// What the status flooder did, as it reports it on its standard output.
public struct StatusFloodResult: Sendable, Hashable {
    /// Calls answered, errors included.
    public var calls = 0
    /// Calls answered with an error, and connections lost.
    public var errors = 0
    /// Pipelined bursts of `StatusFlood.burstSize` `GetStatus` calls sent.
    public var bursts = 0
    /// The longest single call, from sending it to reading its reply, in milliseconds.
    public var longestCallMilliseconds = 0.0
    /// The longest burst, from sending its calls to reading the last reply, in milliseconds.
    public var longestBurstMilliseconds = 0.0
    /// The first error, if any.
    public var firstError: String?

    /// The one line the flooder prints: `key=value` pairs, the error last as it may hold spaces.
    var line: String {
        "calls=\(calls) errors=\(errors) bursts=\(bursts) longestCallMs=\(longestCallMilliseconds) "
            + "longestBurstMs=\(longestBurstMilliseconds)" + (firstError.map { " firstError=\($0)" } ?? "")
    }

    /// Parses `line`; nil when it is not one.
    init?(line: String) {
        var result = StatusFloodResult()
        var rest = Substring(line.trimmingCharacters(in: .whitespacesAndNewlines))
        if let range = rest.range(of: " firstError=") {
            result.firstError = String(rest[range.upperBound...])
            rest = rest[..<range.lowerBound]
        }
        var seen = 0
        for pair in rest.split(separator: " ") {
            let parts = pair.split(separator: "=", maxSplits: 1)
            guard parts.count == 2 else { return nil }
            let value = String(parts[1])
            switch parts[0] {
            case "calls": result.calls = Int(value) ?? 0
            case "errors": result.errors = Int(value) ?? 0
            case "bursts": result.bursts = Int(value) ?? 0
            case "longestCallMs": result.longestCallMilliseconds = Double(value) ?? 0
            case "longestBurstMs": result.longestBurstMilliseconds = Double(value) ?? 0
            default: continue
            }
            seen += 1
        }
        guard seen == 5 else { return nil }
        self = result
    }

    init() {}
}

/// The hidden `status-flood` mode: one connection making status calls in a loop, as an unprivileged user would.
///
/// A round is `GetStatus`, `ListApps` and `History`, one after the other, then a pause of `roundPause`; every
/// `burstInterval` a burst of `burstSize` `GetStatus` calls goes out in one write before any reply is read.
/// Any user may make these calls (the lists are filtered to the caller's apps, none for `nobody`), so whatever
/// they cost the daemon, any user can make it pay.
enum StatusFlood {
    /// 10 ms between rounds: about a hundred rounds a second, harder than any status bar or monitor polls,
    /// yet leaving CPU time for the apps on a two-core machine.
    static let roundPause: Duration = .milliseconds(10)
    /// A burst every 5 s: a few per run, each a test of how long one client can hold the loop.
    static let burstInterval: Duration = .seconds(5)
    /// 40 calls per burst, as in the issue that found 40 pipelined `GetStatus` stalling every other client.
    static let burstSize = 40

    /// Floods the daemon at `socketPath` for `duration`, then prints the result line; returns the exit status.
    static func run(socketPath: String, duration: Duration) -> Int32 {
        let codec = VarlinkCodec()
        let calls: [[UInt8]]
        do {
            calls = [
                try codec.encodeCall(GetStatusParameters()), try codec.encodeCall(ListAppsParameters()),
                try codec.encodeCall(HistoryParameters()),
            ]
        } catch {
            reportFailure("status-flood: \(error)")
            return 1
        }
        var burst = Data()
        for _ in 0..<burstSize { burst.append(contentsOf: calls[0]) }
        var result = StatusFloodResult()
        let end = MonotonicClock.now() + duration.nanosecondCount
        var nextBurst = MonotonicClock.now() + burstInterval.nanosecondCount
        var channel: Channel?
        while MonotonicClock.now() < end {
            do {
                if channel == nil { channel = try Channel(socketPath: socketPath) }
                guard let current = channel else { continue }
                if MonotonicClock.now() >= nextBurst {
                    nextBurst += burstInterval.nanosecondCount
                    let sent = MonotonicClock.now()
                    try current.socket.sendAll(burst)
                    for _ in 0..<burstSize { try current.readReply(codec: codec, into: &result) }
                    result.bursts += 1
                    result.longestBurstMilliseconds = max(
                        result.longestBurstMilliseconds, Double(MonotonicClock.now() - sent) / 1e6)
                }
                for call in calls {
                    let sent = MonotonicClock.now()
                    try current.socket.sendAll(call)
                    try current.readReply(codec: codec, into: &result)
                    result.longestCallMilliseconds = max(
                        result.longestCallMilliseconds, Double(MonotonicClock.now() - sent) / 1e6)
                }
                Thread.sleep(forTimeInterval: Double(roundPause.nanosecondCount) / 1e9)
            } catch {
                result.errors += 1
                if result.firstError == nil { result.firstError = "\(error)" }
                channel?.close()
                channel = nil
                // Not a spin against a daemon that refuses us: try again a little later.
                Thread.sleep(forTimeInterval: 0.1)
            }
        }
        channel?.close()
        print(result.line)
        return 0
    }

    /// One connection and its framing state.
    private final class Channel {
        let socket: FileDescriptor
        private var decoder = VarlinkFrameDecoder(maximumMessageSize: 16 << 20)

        init(socketPath: String) throws {
            socket = try UnixSocket.connect(path: socketPath)
        }

        /// Reads one reply; counts it, and counts it as an error if it is one.
        func readReply(codec: VarlinkCodec, into result: inout StatusFloodResult) throws {
            while true {
                if let message = try decoder.nextMessage() {
                    result.calls += 1
                    if case .error(let error) = try codec.decodeReply(AnyReply.self, from: message) {
                        result.errors += 1
                        if result.firstError == nil { result.firstError = "\(error)" }
                    }
                    return
                }
                // Bounded: a daemon that stops answering for 30 s is a failure, not something to wait out.
                guard try !socket.poll(for: .readable, timeout: .seconds(30)).isEmpty else {
                    throw BenchmarkError("no reply within 30 s")
                }
                let bytes = try socket.read(upTo: 65_536)
                if bytes.isEmpty { throw BenchmarkError("the daemon closed the connection") }
                decoder.append(contentsOf: bytes)
            }
        }

        func close() {
            try? socket.close()
        }
    }

    /// Any reply's parameters, unread.
    private struct AnyReply: Decodable {}
}

/// The status flooder as the benchmark runs it: this executable in `status-flood` mode as another user.
struct StatusFloodProcess {
    private let wrapper: SpawnedProcess
    private let output: FileDescriptor

    /// Starts `executable status-flood --socket SOCKET --duration DURATION` as `user` (through `setpriv`), under
    /// `timeout --signal=KILL` at `duration` plus 30 s.
    init(executable: String, socketPath: String, duration: Duration, user: (uid: uid_t, gid: gid_t)) throws {
        let (readEnd, writeEnd) = try FileDescriptor.pipe()
        defer { try? writeEnd.close() }
        let milliseconds = duration.nanosecondCount / 1_000_000
        let limit = milliseconds / 1000 + 30
        do {
            wrapper = try ProcessSpawner.spawn(
                [
                    "timeout", "--signal=KILL", String(limit), "setpriv", "--reuid=\(user.uid)",
                    "--regid=\(user.gid)", "--clear-groups", executable, "status-flood", "--socket", socketPath,
                    "--duration", "\(milliseconds)ms",
                ],
                options: SpawnOptions(flags: .newProcessGroup, standardOutput: .fileDescriptor(writeEnd)))
        } catch {
            try? readEnd.close()
            throw error
        }
        output = readEnd
    }

    /// Waits at most `timeout` for the flooder to finish and returns what it reported; kills it if it is
    /// still running then. Call once.
    func finish(timeout: Duration) throws -> StatusFloodResult {
        defer {
            try? output.close()
            try? wrapper.pidFD.close()
        }
        if (try? wrapper.pidFD.waitForExit(timeout: timeout)) != true {
            // The flooder and setpriv run in the group timeout leads.
            try? ProcessGroup(id: wrapper.pid).send(.kill)
        }
        let status = try wrapper.waitForExit()
        let text = String(decoding: try output.readToEnd(limit: 1 << 16), as: UTF8.self)
        guard let line = text.split(separator: "\n").last, let result = StatusFloodResult(line: String(line)) else {
            throw BenchmarkError("the status flooder reported nothing (\(status)); output: \(text)")
        }
        return result
    }

    /// The uid and primary gid of `name`, from the user database.
    static func user(named name: String) throws -> (uid: uid_t, gid: gid_t) {
        // getpwnam's static buffer is safe here: one lookup, from the thread that sets up the run.
        guard let entry = getpwnam(name) else { throw BenchmarkError("no user \(name) in the user database") }
        return (entry.pointee.pw_uid, entry.pointee.pw_gid)
    }
}
