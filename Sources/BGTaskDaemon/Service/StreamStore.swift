// Apps' event streams kept in systemd's fd store, so a daemon restarted after a crash or a watchdog abort picks
// them up where the last one left them: the apps do not even see the restart.

import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// Where the streams are kept: systemd's fd store (`ServiceNotifier`), or a test's fake.
protocol DescriptorStoreBackend {
    /// How many descriptors the store takes (`FDSTORE=`); 0: there is none.
    var fileDescriptorStoreLimit: Int { get }
    /// Keeps copies of `descriptors` under `name`; whether a message was sent.
    @discardableResult
    func storeFileDescriptors(_ descriptors: [FileDescriptor], name: String) throws(Errno) -> Bool
    /// Closes the store's copies kept under `name`.
    @discardableResult
    func removeStoredFileDescriptors(name: String) throws(Errno) -> Bool
}

extension ServiceNotifier: DescriptorStoreBackend {}

/// The event streams the daemon keeps in the fd store, at most as many as it takes, and those the last daemon
/// kept, handed over at start until they are taken back or dropped. Which stream is whose, and whether a handed-over
/// one may be taken back, is the manager's to say (`Manager+FileDescriptorStore.swift`).
final class StreamStore {
    /// The prefix of an event stream's name in the store; the app's identity follows.
    static let namePrefix = "app-"

    /// How many streams the store takes (0: none), read at start (`readLimit()`).
    private(set) var limit = 0
    /// How many streams this daemon keeps there.
    private(set) var count = 0
    private let backend: any DescriptorStoreBackend
    private let logger: Logger
    private var isFullLogged = false
    /// The streams the last daemon kept, until `takeHandedOver()`.
    private var handedOver: [(name: String, descriptor: FileDescriptor)] = []

    /// A store kept in `backend`.
    init(backend: any DescriptorStoreBackend, logger: Logger) {
        self.backend = backend
        self.logger = logger
    }

    /// Reads how many streams the store takes (at start: the service manager says it in the environment).
    func readLimit() {
        limit = backend.fileDescriptorStoreLimit
    }

    /// Whether a descriptor passed at start under `name` is an event stream (not a listening socket).
    static func isStreamName(_ name: String) -> Bool {
        name.hasPrefix(namePrefix)
    }

    /// The stream name of `app`, and the app a stream name names (nil: none).
    static func name(of app: AppID) -> String {
        namePrefix + String(app.rawValue)
    }

    static func app(named name: String) -> AppID? {
        guard isStreamName(name), let raw = Int64(name.dropFirst(namePrefix.count)), raw > 0 else { return nil }
        return AppID(rawValue: raw)
    }

    /// Takes note of a stream the last daemon kept, passed at start.
    func handOver(_ descriptor: FileDescriptor, name: String) {
        handedOver.append((name, descriptor))
    }

    /// The streams the last daemon kept that are not taken yet; the caller takes back or drops each.
    func takeHandedOver() -> [(name: String, descriptor: FileDescriptor)] {
        defer { handedOver = [] }
        return handedOver
    }

    /// Keeps `descriptor`, `app`'s new event stream, in the store; its name there, or nil (logged) when there is no
    /// store, it is full, or the store refused it.
    func store(_ descriptor: FileDescriptor, of app: AppID, appName: @autoclosure () -> String) -> String? {
        guard limit > 0 else { return nil }
        guard count < limit else {
            if !isFullLogged {
                isFullLogged = true
                logger.warning(
                    "the fd store is full (FDSTORE=\(limit)): further event streams re-attach after a restart "
                        + "instead of being kept")
            }
            return nil
        }
        let name = Self.name(of: app)
        do {
            guard try backend.storeFileDescriptors([descriptor], name: name) else { return nil }
        } catch {
            logger.warning("cannot keep the event stream of \(appName()) in the fd store: \(error)")
            return nil
        }
        count += 1
        return name
    }

    /// A stream handed over is kept again (its app took it back).
    func adopted() {
        count += 1
    }

    /// A stored stream's connection closed: systemd lets go of its copy too, unless the daemon is stopping (the
    /// copies stay for the next daemon then).
    func release(name: String, isStopping: Bool) {
        count -= 1
        guard !isStopping else { return }
        remove(name: name)
    }

    /// Has systemd close its copy of the stream kept under `name`.
    func remove(name: String) {
        _ = try? backend.removeStoredFileDescriptors(name: name)
    }

    /// Ends a handed-over stream no app takes back: shut for both ends (the client sees it closed, and systemd's
    /// copy reports a hang-up), closed, and removed from the store.
    func drop(_ descriptor: FileDescriptor, name: String) {
        _ = Glibc.shutdown(descriptor.rawValue, Int32(SHUT_RDWR))
        try? descriptor.close()
        remove(name: name)
    }
}
