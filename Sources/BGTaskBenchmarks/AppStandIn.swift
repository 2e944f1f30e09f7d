// The stand-in process behind each benchmark or test app: the one the daemon suspends, measures and watches for exit.

import BGTaskPOSIX
import Glibc

/// The process a benchmark app registers from, while the app's logic runs on the benchmark's threads.
///
/// bgtaskd ties an app to the process that connected its event stream (the peer credentials of the `Register`
/// connection) and suspends that process with SIGSTOP. A hundred apps as threads of one benchmark process would
/// stop the benchmark itself, so each app gets a stand-in: the benchmark executable in its hidden `app-process`
/// mode, which connects to the daemon, hands the connected socket back over its standard input (`SCM_RIGHTS`)
/// and then does nothing until that input closes. The daemon stops, continues, measures and kills the stand-in
/// as it would an app's process of the same size (a small Swift program); the benchmark talks over the socket.
///
/// The tests of the manager on a manual clock use the same stand-ins as their apps' processes.
///
/// The stand-in runs under `timeout --signal=KILL`, so it ends by itself even when it is left stopped.
public struct AppStandIn: Sendable {
    /// The `timeout` process the stand-in runs under: the benchmark's child.
    public let wrapper: SpawnedProcess
    /// The stand-in itself.
    public let process: PidFD
    /// A socket to the daemon, connected by the stand-in: the app's event stream goes over it.
    public let connection: FileDescriptor
    /// The benchmark's end of the stand-in's standard input; closing it lets the stand-in exit.
    private let control: FileDescriptor

    /// Bytes of the stand-in's pid beside the descriptor it passes.
    private static let pidByteCount = MemoryLayout<Int32>.size

    /// A stand-in started and not yet connected.
    public struct Launch: Sendable {
        let wrapper: SpawnedProcess
        let control: FileDescriptor

        /// Waits at most `timeout` for the stand-in's connection; kills the stand-in when none comes.
        public func connected(timeout: Duration) throws -> AppStandIn {
            do {
                guard
                    let (connection, payload) = try DescriptorPassing.receive(
                        over: control, payloadCapacity: AppStandIn.pidByteCount, timeout: timeout)
                else {
                    throw BenchmarkError("an app stand-in exited before it connected (\(wrapper))")
                }
                guard payload.count == AppStandIn.pidByteCount else {
                    try? connection.close()
                    throw BenchmarkError("an app stand-in sent \(payload.count) bytes instead of its pid")
                }
                let pid = payload.withUnsafeBytes { $0.loadUnaligned(as: Int32.self) }
                do {
                    // The stand-in is alive: it waits for its input to close, which has not happened.
                    let process = try PidFD.open(pid: pid)
                    return AppStandIn(wrapper: wrapper, process: process, connection: connection, control: control)
                } catch {
                    try? connection.close()
                    throw error
                }
            } catch {
                abandon()
                throw error
            }
        }

        /// Kills the group `timeout` leads (it and the stand-in) and reaps `timeout`.
        public func abandon() {
            try? ProcessGroup(id: wrapper.pid).send(.kill)
            _ = try? wrapper.waitForExit()
            try? wrapper.pidFD.close()
            try? control.close()
        }
    }

    /// Starts `executable app-process --socket SOCKET` under `timeout --signal=KILL LIFETIME`; call
    /// `connected(timeout:)` on the result to get the stand-in's connection.
    public static func launch(executable: String, socketPath: String, lifetime: Duration) throws -> Launch {
        let (mine, theirs) = try UnixSocket.pair()
        defer { try? theirs.close() }
        do {
            let seconds = max(1, Int(lifetime.components.seconds))
            let wrapper = try ProcessSpawner.spawn(
                ["timeout", "--signal=KILL", String(seconds), executable, "app-process", "--socket", socketPath],
                options: SpawnOptions(flags: .newProcessGroup, standardInput: .fileDescriptor(theirs)))
            return Launch(wrapper: wrapper, control: mine)
        } catch {
            try? mine.close()
            throw error
        }
    }

    /// Kills the stand-in (SIGKILL ends it stopped or not), reaps its `timeout`, and closes the connection and
    /// descriptors. Call once, after the app's registration ended.
    public func stop() {
        try? process.sendSignal(.kill)
        try? control.close()
        if (try? wrapper.pidFD.waitForExit(timeout: .seconds(5))) != true {
            try? wrapper.pidFD.sendSignal(.kill)
        }
        _ = try? wrapper.waitForExit()
        try? process.close()
        try? wrapper.pidFD.close()
    }

    /// Asks the stand-in for another connection to the daemon, made by the stand-in (so the daemon sees the same
    /// process as the peer: how an app re-attaches after a daemon restart). Waits at most `timeout`.
    public func reconnect(timeout: Duration) throws -> FileDescriptor {
        try control.writeAll([UInt8(ascii: "c")])
        guard
            let (connection, _) = try DescriptorPassing.receive(
                over: control, payloadCapacity: Self.pidByteCount, timeout: timeout)
        else {
            throw BenchmarkError("the app stand-in (pid \(process.pid)) exited instead of connecting again")
        }
        return connection
    }

    /// The hidden `app-process` mode: connects to `socketPath`, passes the connection and this process's pid
    /// over standard input, then connects again each time a byte arrives on standard input, until it closes.
    /// Returns the exit status.
    static func serve(socketPath: String) -> Int32 {
        func connectAndPass() throws {
            let connection = try UnixSocket.connect(path: socketPath)
            defer { try? connection.close() }
            let pid = getpid()
            let payload = withUnsafeBytes(of: pid) { Array($0) }
            // The receiver holds its own copy then; the daemon still sees this process as the peer.
            try DescriptorPassing.send(connection, payload: payload, over: .standardInput)
        }
        do {
            try connectAndPass()
        } catch {
            reportFailure("app-process: \(error)")
            return 1
        }
        while true {
            do {
                let request = try FileDescriptor.standardInput.read(upTo: 64)
                if request.isEmpty { return 0 }
                for _ in request { try connectAndPass() }
            } catch {
                reportFailure("app-process: \(error)")
                return 1
            }
        }
    }
}

/// Writes `message` as one line on standard error; nothing is left to report a failure of that write to.
func reportFailure(_ message: String) {
    try? FileDescriptor.standardError.writeAll(Array("\(message)\n".utf8))
}
