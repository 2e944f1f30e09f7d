// The daemon's one-line status for `systemctl status` (`STATUS=`), rate-limited.

import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem

/// Where `STATUS=` goes: the service manager (`ServiceNotifier`), or a test's fake.
protocol StatusSink {
    /// Whether anyone listens; read once, by the first update.
    var isSupervised: Bool { get }
    /// Sends the status text; whether a message was sent.
    @discardableResult
    func status(_ text: String) throws(Errno) -> Bool
}

extension ServiceNotifier: StatusSink {}

/// What the status says: the manager, or a test's fake.
protocol StatusSource: AnyObject {
    /// The status as it is now ("3 apps, 1 suspended, 2 tasks, 4 clients").
    var statusText: String { get }
}

/// Sends the daemon's status at most once per `interval`, only when the text changed, and the last change always
/// once the interval ends. A burst of calls must not flood the service manager (a full queue would block
/// `sd_notify`), and building the text counts apps, so it is built only when a message may go out, not on every
/// call.
final class StatusReporter {
    /// The least time between two `STATUS=` messages.
    static let interval: Duration = .seconds(1)

    /// Where the text comes from (the manager).
    weak var source: (any StatusSource)?
    /// The text last sent.
    private(set) var sentStatus: String?
    private let sink: any StatusSink
    private let clock: ManagerClock
    private let logger: Logger
    /// Whether a service manager listens, read once: `update()` asks after every call, and the environment does
    /// not change under a running daemon.
    private lazy var isSupervised = sink.isSupervised
    private var lastStatusTime: MonotonicInstant?
    /// The timer for a change held back by the rate limit, made at the first one.
    private var timer: ManagerTimer?
    private var isUpdatePending = false

    /// A reporter sending to `sink`, on `clock`'s time and timers.
    init(sink: any StatusSink, clock: ManagerClock, logger: Logger) {
        self.sink = sink
        self.clock = clock
        self.logger = logger
    }

    /// Something the status shows may have changed: sent now, or when the interval since the last one ends.
    func update() {
        guard isSupervised, !isUpdatePending, let source else { return }
        let current = clock.now
        if let lastStatusTime, current - lastStatusTime < Self.interval {
            do {
                if timer == nil {
                    timer = try clock.makeTimer(name: "status", accuracy: .milliseconds(1)) { [weak self] in
                        guard let self else { return }
                        self.isUpdatePending = false
                        self.update()
                    }
                }
                try timer?.rearm(at: lastStatusTime + Self.interval)
                isUpdatePending = true
            } catch {
                logger.warning("cannot schedule a status update: \(error)")
            }
            return
        }
        let text = source.statusText
        guard text != sentStatus else { return }
        lastStatusTime = current
        sentStatus = text
        _ = try? sink.status(text)
    }
}

extension Manager: StatusSource {
    var statusText: String {
        "\(core.liveAppCount) apps, \(core.suspendedAppCount) suspended, \(core.openTaskCount) tasks, "
            + "\(connections.count) clients"
    }

    /// The service manager the daemon reports to: readiness, reloads, stopping and the fd store (`STATUS=` goes
    /// through `statusReporter`). It keeps nothing: each call reads `NOTIFY_SOCKET` afresh.
    var notifier: ServiceNotifier { ServiceNotifier() }

    /// The status may have changed: `systemctl status` shows it within `StatusReporter.interval`.
    func updateStatus() {
        statusReporter.update()
    }
}
