// The manager as its connection server's host: calls handed to the method table, closed event streams ending
// their registrations, and read-only views of the server's tables for the code that sends on them.

import BGTaskConfig
import BGTaskCore
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSystem
import Glibc

extension Manager: ConnectionServerHost {
    var connectionLimits: DaemonConfiguration.Limits { configuration.limits }

    func dispatch(_ call: IncomingCall, to method: CallableMethod) {
        var call = call
        // Marked before the handler runs: its reply, and the events it causes, are held until the state they
        // reflect is saved.
        if !method.isReadOnly {
            call.changesState = true
            stateChanged()
        }
        method.handler.serve(self, call)
        updateStatus()
    }

    func connectionClosed(_ connection: ClientConnection, endingStreamOf app: AppID?, because reason: String) {
        unstoreStream(connection)
        if let app {
            logger.debug("event stream of \(appName(app)) closed: \(reason)")
            // The daemon closing every stream as it stops is not the app leaving: its registration, leases and
            // all, waits in the state file for the app to re-attach to the next daemon.
            if !isStopping {
                perform(core.registrationClosed(app, now: now))
                pruneProcess(of: app)
            }
        }
        updateStatus()
    }
}

extension Manager {
    /// The codec every message is encoded and decoded with (the server's).
    var codec: VarlinkCodec { connectionServer.codec }
    /// The open connections, each registered app's event stream, and the `Watch` streams (the server's, read-only:
    /// the server changes them).
    var connections: [Int: ClientConnection] { connectionServer.connections }
    var eventStreams: [AppID: ClientConnection] { connectionServer.eventStreams }
    var watchers: [Int: ClientConnection] { connectionServer.watchers }

    /// Listens on the sockets systemd passed, or on the socket path.
    func openListeners() throws(StartupError) {
        try connectionServer.openListeners()
    }

    /// A descriptor came free: accepting resumes if it was paused for want of one.
    func resumeListeners() {
        connectionServer.resumeListeners()
    }

    /// Serves a client on `descriptor` within the connection limits; nil when it was refused (and closed).
    @discardableResult
    func admit(_ descriptor: FileDescriptor) -> ClientConnection? {
        connectionServer.admit(descriptor)
    }
}
