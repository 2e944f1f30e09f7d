// Apps' event streams kept in systemd's fd store, so a daemon restarted after a crash or a watchdog abort picks
// them up where the last one left them: the apps do not even see the restart.

import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem
import Glibc

extension Manager {
    /// The prefix of an event stream's name in the fd store; the app's identity follows.
    static let storedStreamPrefix = "app-"

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
            if descriptor.name.hasPrefix(Self.storedStreamPrefix) {
                storedStreamDescriptors.append((descriptor.name, descriptor.fileDescriptor))
            } else {
                listenedSockets.append(descriptor.fileDescriptor)
            }
        }
    }

    /// Keeps an app's new event stream in the fd store, named after the app, when the service has one.
    func storeStream(_ connection: ClientConnection, of app: AppID) {
        guard fileDescriptorStoreLimit > 0, connection.storedName == nil, !isStopping else { return }
        guard storedStreamCount < fileDescriptorStoreLimit else {
            if !isStoreFullLogged {
                isStoreFullLogged = true
                logger.warning(
                    "the fd store is full (FDSTORE=\(fileDescriptorStoreLimit)): further event streams re-attach "
                        + "after a restart instead of being kept")
            }
            return
        }
        let name = Self.storedStreamPrefix + String(app.rawValue)
        do {
            guard try notifier.storeFileDescriptors([connection.descriptor], name: name) else { return }
        } catch {
            logger.warning("cannot keep the event stream of \(appName(app)) in the fd store: \(error)")
            return
        }
        connection.storedName = name
        connection.shutsDownOnClose = true
        storedStreamCount += 1
    }

    /// A stored stream's connection closed while the daemon runs: systemd lets go of its copy too.
    func unstoreStream(_ connection: ClientConnection) {
        guard let name = connection.storedName else { return }
        connection.storedName = nil
        storedStreamCount -= 1
        guard !isStopping else { return }
        _ = try? notifier.removeStoredFileDescriptors(name: name)
    }

    /// Takes back the event streams the last daemon kept in the fd store, each only for a restored app whose
    /// process was adopted and is the stream's peer (same pid and uid); the others are shut and dropped from the
    /// store. Called while restoring, before the policy catches up, so events of deadlines that passed meanwhile
    /// reach the apps.
    func adoptStoredStreams() {
        let stored = storedStreamDescriptors
        storedStreamDescriptors = []
        var kept = 0
        for (name, descriptor) in stored {
            guard let app = storedStreamApp(name, descriptor) else {
                dropStoredStream(name, descriptor)
                continue
            }
            guard let connection = admit(descriptor) else {
                _ = try? notifier.removeStoredFileDescriptors(name: name)
                continue
            }
            connection.stream = .registration(app)
            connection.storedName = name
            connection.shutsDownOnClose = true
            eventStreams[app] = connection
            storedStreamCount += 1
            kept += 1
        }
        if !stored.isEmpty {
            logger.notice(
                "took \(kept) of \(stored.count) apps' event streams back from the fd store; the rest re-attach")
        }
    }

    /// Shuts and drops stored streams nothing restored claims (there was no usable state).
    func discardStoredStreams() {
        guard !storedStreamDescriptors.isEmpty else { return }
        logger.notice(
            "dropping \(storedStreamDescriptors.count) event streams from the fd store: no saved state claims them")
        for (name, descriptor) in storedStreamDescriptors { dropStoredStream(name, descriptor) }
        storedStreamDescriptors = []
    }

    /// Ends a stored stream no app takes back: shut for both ends (the client sees it closed, and systemd's copy
    /// reports a hang-up), closed, and removed from the store.
    private func dropStoredStream(_ name: String, _ descriptor: FileDescriptor) {
        _ = Glibc.shutdown(descriptor.rawValue, Int32(SHUT_RDWR))
        try? descriptor.close()
        _ = try? notifier.removeStoredFileDescriptors(name: name)
    }

    /// The restored app a stored stream belongs to: named after it, with no stream yet, its process adopted and
    /// the stream's peer.
    private func storedStreamApp(_ name: String, _ descriptor: FileDescriptor) -> AppID? {
        guard let raw = Int64(name.dropFirst(Self.storedStreamPrefix.count)), raw > 0 else { return nil }
        let app = AppID(rawValue: raw)
        guard eventStreams[app] == nil, let process = processOfApp[app],
            let credentials = try? UnixSocket.peerCredentials(of: descriptor),
            credentials.pid == process.pid, credentials.uid == process.uid
        else { return nil }
        return app
    }
}
