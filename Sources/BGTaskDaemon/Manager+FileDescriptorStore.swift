// The manager's side of the fd store (`Service/StreamStore.swift`): which app a kept event stream is, and taking
// the streams the last daemon kept back on start.

import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem
import Glibc

extension Manager {
    /// Takes the descriptors systemd passed: listening sockets for `openListeners()`, and the event streams a
    /// previous daemon stored, for `adoptStoredStreams()`.
    func takeListenedDescriptors() throws(StartupError) {
        let passed: [ServiceNotifier.ListenedDescriptor]
        do {
            passed = try ServiceNotifier.listenedDescriptors()
        } catch {
            throw StartupError(description: "cannot read the sockets passed by systemd: \(error)")
        }
        for descriptor in passed {
            if StreamStore.isStreamName(descriptor.name) {
                streamStore.handOver(descriptor.fileDescriptor, name: descriptor.name)
            } else {
                connectionServer.adoptListeningSocket(descriptor.fileDescriptor)
            }
        }
    }

    /// Keeps an app's new event stream in the fd store, named after the app, when the service has one.
    func storeStream(_ connection: ClientConnection, of app: AppID) {
        guard connection.storedName == nil, !isStopping,
            let name = streamStore.store(connection.descriptor, of: app, appName: appName(app))
        else { return }
        connection.storedName = name
        connection.shutsDownOnClose = true
    }

    /// A stored stream's connection closed while the daemon runs: systemd lets go of its copy too.
    func unstoreStream(_ connection: ClientConnection) {
        guard let name = connection.storedName else { return }
        connection.storedName = nil
        streamStore.release(name: name, isStopping: isStopping)
    }

    /// Takes back the event streams the last daemon kept in the fd store, each only for a restored app whose
    /// process was adopted and is the stream's peer (same pid and uid); the others are shut and dropped from the
    /// store. Called while restoring, before the policy is given any input (each one catches it up), so events of
    /// deadlines that passed meanwhile reach the apps: one sent to a restored app without a stream is held for its
    /// `Register`, and an app whose stream was kept never registers again.
    func adoptStoredStreams() {
        let stored = streamStore.takeHandedOver()
        var kept = 0
        for (name, descriptor) in stored {
            guard let app = storedStreamApp(name, descriptor) else {
                streamStore.drop(descriptor, name: name)
                continue
            }
            guard let connection = admit(descriptor) else {
                streamStore.remove(name: name)
                continue
            }
            connectionServer.attachEventStream(connection, of: app)
            connection.storedName = name
            connection.shutsDownOnClose = true
            streamStore.adopted()
            kept += 1
        }
        if !stored.isEmpty {
            logger.notice(
                "took \(kept) of \(stored.count) apps' event streams back from the fd store; the rest re-attach")
        }
    }

    /// Shuts and drops stored streams nothing restored claims (there was no usable state).
    func discardStoredStreams() {
        let left = streamStore.takeHandedOver()
        guard !left.isEmpty else { return }
        logger.notice("dropping \(left.count) event streams from the fd store: no saved state claims them")
        for (name, descriptor) in left { streamStore.drop(descriptor, name: name) }
    }

    /// The restored app a stored stream belongs to: named after it, with no stream yet, its process adopted and
    /// the stream's peer.
    private func storedStreamApp(_ name: String, _ descriptor: FileDescriptor) -> AppID? {
        guard let app = StreamStore.app(named: name) else { return nil }
        guard eventStreams[app] == nil, let process = processOfApp[app],
            let credentials = try? UnixSocket.peerCredentials(of: descriptor),
            credentials.pid == process.pid, credentials.uid == process.uid
        else { return nil }
        return app
    }
}
