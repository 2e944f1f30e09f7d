// Scheduled requests kept where they outlive a reboot (`StateDirectory=`), written on a thread of their own.

import BGTaskCore
import BGTaskJSON
import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// The file that keeps the scheduled requests, the scheduled-time ledgers and the last-foreground times across
/// reboots: `scheduled.json` in the service's state directory (`/var/lib/bgtaskd`, or the user manager's state
/// directory for a user instance).
///
/// The runtime state (`StateStore`) holds them too, with everything else, and is what a restart within one boot
/// restores. This file is what is left after a reboot, when the runtime directory is gone or holds another boot's
/// state: the daemon then starts from it (`SavedLifecycle(afterReboot:wallClockNow:)`).
///
/// Written when the requests changed, at most once per `writeInterval`, by a worker thread (a write ends with
/// `fsync` of the file and its directory, which a slow disk can stretch to seconds: never on the loop). Only the
/// latest requests wait to be written; the worker encodes them too. At stop the last ones are written before the
/// daemon exits.
final class ScheduledStore {
    /// The file.
    let path: String
    /// How often at most the file is written while requests keep changing. One second: a power cut loses at most
    /// the last second's submits, and a peer submitting in a loop costs one write a second.
    static let writeInterval: Duration = .seconds(1)
    /// An encoding at least this large is followed by a trim of the heap (`Heap.trim()`): it peaks the heap at
    /// several times its size and frees it all, which would otherwise stay resident; smaller ones peak it by less
    /// than a trim is worth.
    static let trimAfterEncodingBytes = 64 << 10
    /// The largest file read back: 4096 requests (`ScheduledRequestsMax`) take well under 4 MiB.
    static let readLimit = 16 << 20

    private let logger: Logger
    private let loop: EventLoop
    private let clock: ManagerClock
    private var worker: BackgroundWorker<SavedScheduling, String?>?
    private var outcomeSource: IOSource?
    private var timer: ManagerTimer?
    /// The revision of the requests last handed to the worker.
    private var handedRevision: UInt64?
    /// Requests waiting for the worker to finish writing the ones before.
    private var waiting: SavedScheduling?
    /// Whether a write is running.
    private var isWriting = false
    private var lastHanded: MonotonicInstant?
    /// The last write's failure, logged once until a write succeeds again.
    private var lastFailure: String?

    init(path: String, logger: Logger, loop: EventLoop, clock: ManagerClock) {
        self.path = path
        self.logger = logger
        self.loop = loop
        self.clock = clock
    }

    // MARK: Reading

    /// What the file holds; nil when there is no file. A file that cannot be used is set aside (renamed with
    /// `.unusable`), logged, and read as none.
    func load() -> SavedScheduling? {
        let data: [UInt8]
        do {
            let descriptor = try FileDescriptor.open(path, .readOnly, options: [.noFollow])
            defer { try? descriptor.close() }
            data = try descriptor.readToEnd(limit: Self.readLimit)
        } catch {
            if error == .noSuchFileOrDirectory { return nil }
            setAside(because: "it cannot be read: \(error)")
            return nil
        }
        do {
            let saved = try JSONValueDecoder().decode(SavedScheduledFile.self, from: try JSONParser.parse(data))
            guard saved.format == SavedScheduledFile.formatName, saved.version == SavedScheduledFile.currentVersion
            else {
                setAside(because: "it is a \(saved.format) file of version \(saved.version)")
                return nil
            }
            return saved.scheduling
        } catch {
            setAside(because: "it is not a file of scheduled requests (\(error))")
            return nil
        }
    }

    private func setAside(because reason: String) {
        let destination = path + ".unusable"
        if Glibc.rename(path, destination) == 0 {
            logger.warning("not restoring scheduled requests from \(path): \(reason); set aside as \(destination)")
        } else {
            logger.warning("not restoring scheduled requests from \(path): \(reason); removing it")
            unlink(path)
        }
    }

    // MARK: Writing

    /// Starts the worker thread and its outcome source, making the file's directory if it is missing (mode 0700:
    /// requests name the apps users run).
    func start() throws(StartupError) {
        let directory = StateStore.directory(of: path)
        if access(directory, F_OK) != 0 {
            var made = ""
            for component in directory.split(separator: "/") {
                made += "/" + component
                if mkdir(made, 0o700) != 0 && errno != EEXIST {
                    throw StartupError(
                        description: "cannot make \(made) for the scheduled requests: "
                            + "\(Errno(rawValue: errno, operation: "mkdir"))")
                }
            }
        }
        do {
            let worker = try BackgroundWorker<SavedScheduling, String?>(name: "bgtask-schedule", capacity: 1) {
                [path] scheduling in Self.encodeAndWrite(scheduling, to: path)
            }
            self.worker = worker
            outcomeSource = try loop.addIO(fd: worker.outcomesReady, events: .readable, name: "scheduled-written") {
                [unowned self] _, _ in self.writesFinished()
            }
            timer = try clock.makeTimer(name: "scheduled-write", accuracy: .milliseconds(100)) {
                [unowned self] in self.writeIfChanged?()
            }
        } catch {
            throw StartupError(description: "cannot start the writer of \(path): \(error)")
        }
    }

    /// Set by the manager: calls `save(_:revision:)` with the requests as they are (when the interval has passed).
    var writeIfChanged: (() -> Void)?

    /// Hands `scheduling` (at `revision`) to the worker now, or once `writeInterval` has passed since the last
    /// time it did.
    func save(_ scheduling: @autoclosure () -> SavedScheduling, revision: UInt64) {
        guard worker != nil, handedRevision != revision else { return }
        let now = clock.now
        if let last = lastHanded, now < last + Self.writeInterval {
            if timer?.deadline == nil { try? timer?.rearm(at: last + Self.writeInterval) }
            return
        }
        handedRevision = revision
        lastHanded = now
        hand(scheduling())
    }

    /// The requests go to the worker, which encodes and writes them: with a day's ledgers the file is a megabyte,
    /// whose encoding took the loop a tenth of a second, every second that requests changed.
    private func hand(_ scheduling: SavedScheduling) {
        guard let worker else { return }
        if isWriting {
            waiting = scheduling
            return
        }
        if worker.submit(scheduling) {
            isWriting = true
        } else {
            waiting = scheduling
        }
    }

    private func writesFinished() {
        guard let worker else { return }
        for outcome in worker.takeOutcomes() {
            isWriting = false
            if let outcome {
                report(outcome)
            } else if lastFailure != nil {
                lastFailure = nil
                logger.notice("scheduled requests written to \(path) again")
            }
        }
        if !isWriting, let next = waiting {
            waiting = nil
            hand(next)
        }
    }

    private func report(_ failure: String) {
        guard lastFailure != failure else { return }
        lastFailure = failure
        logger.error("\(failure); they are kept in the runtime state, which a reboot loses")
    }

    /// Stops the worker, waiting at most `timeout` for a write under way, then writes `final` itself: a write the
    /// worker had not begun is dropped by its stop, so the last state is always written here. A worker still
    /// writing after `timeout` (a stuck disk) is the file's only writer: the final state is then not written (it is
    /// in the runtime state), and that is logged.
    func stop(final: SavedScheduling, timeout: Duration = .seconds(5)) {
        timer?.disarm()
        outcomeSource?.cancel()
        outcomeSource = nil
        guard let worker else { return }
        self.worker = nil
        guard worker.stop(timeout: timeout) else {
            logger.warning(
                "the writer of \(path) is still writing after \(timeout): the last scheduled requests are not written")
            return
        }
        do {
            if let error = Self.write(try Self.encode(final), to: path) { logger.error(error) }
        } catch {
            logger.error("cannot encode the scheduled requests: \(error)")
        }
    }

    // MARK: The file

    static func encode(_ scheduling: SavedScheduling) throws -> [UInt8] {
        Array(
            try JSONTextEncoder(sortsKeys: true, writesAbsentOptionals: false).encode(
                SavedScheduledFile(
                    format: SavedScheduledFile.formatName, version: SavedScheduledFile.currentVersion,
                    scheduling: scheduling)))
    }

    /// Encodes `scheduling` and writes it in place of the file (`write`), then trims the heap after a large
    /// encoding. Returns why it failed, or nil. Runs on the worker thread.
    static func encodeAndWrite(_ scheduling: SavedScheduling, to path: String) -> String? {
        let bytes: [UInt8]
        do {
            bytes = try encode(scheduling)
        } catch {
            return "cannot encode the scheduled requests: \(error)"
        }
        defer { if bytes.count >= trimAfterEncodingBytes { Heap.trim() } }
        return write(bytes, to: path)
    }

    /// Writes `bytes` in place of the file, durably (`FileReplacement`, with `fsync` of the file and its
    /// directory). Returns why it failed, or nil. Runs on the worker thread.
    static func write(_ bytes: [UInt8], to path: String) -> String? {
        do {
            try FileReplacement.replace(path, with: bytes, durably: true)
            return nil
        } catch {
            return "cannot write the scheduled requests to \(path): \(error)"
        }
    }
}

/// The file's content: a header naming the format, and the scheduling state.
struct SavedScheduledFile: Codable {
    static let formatName = "bgtaskd-scheduled"
    static let currentVersion = 1
    var format: String
    var version: Int
    var scheduling: SavedScheduling
}
