// The network condition from the kernel: rtnetlink's notifications of links and routes, each followed by a fresh dump
// of both, and the rule "a default route of the main table through an interface that is up".

import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// Follows the network namespace's links and routes. A notification (or a lost one: `ENOBUFS`) only says that
/// something changed; the state is then read whole with a dump of the links and one of the routes, on a second
/// socket, asynchronously on the loop, so it never depends on having seen every notification. The first dump runs at
/// start, waiting for the kernel (which answers within the call) at most a second.
final class RouteWatch {
    private let logger: Logger
    private let loop: EventLoop
    private let changed: () -> Void
    private var notifications: NetlinkSocket?
    private var dumps: NetlinkSocket?
    private var notificationSource: IOSource?
    private var dumpSource: IOSource?

    /// What the last complete dump said; nil before the first, or without rtnetlink.
    private(set) var reachability: NetworkReachability?
    /// Why rtnetlink cannot be followed, when it cannot.
    private(set) var failure: String?

    /// The dump in progress: what it asked for, its sequence number, and what it has read so far.
    private enum DumpState {
        case idle
        case links(sequence: UInt32, NetworkReachability)
        case routes(sequence: UInt32, NetworkReachability)
    }
    private var dumpState = DumpState.idle
    /// Whether something changed since the dump in progress began: another dump follows it.
    private var isAnotherDumpWanted = false
    private var nextSequence: UInt32 = 1
    /// The most links and default routes one dump keeps (other routes are not kept at all, so a router's full table
    /// costs only the time to read it): far above any host's.
    static let entryLimit = 65_536
    /// Dumps started over in a row because a message could not be read; past `malformedRestartLimit` the next
    /// notification starts the next one, so a kernel the parser misreads cannot keep the loop busy.
    private var malformedRestarts = 0
    static let malformedRestartLimit = 3

    init(logger: Logger, loop: EventLoop, changed: @escaping () -> Void) {
        self.logger = logger
        self.loop = loop
        self.changed = changed
    }

    deinit { stop() }

    /// Opens both sockets and reads the state once; `failure` says why when rtnetlink cannot be used.
    func start() {
        do {
            // Notifications are only a cue (their content is not read), so an overrun (`ENOBUFS`) costs one more
            // dump; 1 MiB holds the burst of an interface with many routes going down.
            let notifications = try NetlinkSocket(
                protocolNumber: RouteNetlink.protocolNumber, groups: RouteNetlink.linkAndRouteGroups,
                receiveBufferBytes: 1 << 20)
            let dumps = try NetlinkSocket(protocolNumber: RouteNetlink.protocolNumber, groups: 0)
            notificationSource = try loop.addIO(
                fd: notifications.fileDescriptor, events: .readable, name: "route-notifications"
            ) { [weak self] _, _ in self?.notificationsReadable() }
            dumpSource = try loop.addIO(fd: dumps.fileDescriptor, events: .readable, name: "route-dumps") {
                [weak self] _, _ in self?.dumpReadable()
            }
            self.notifications = notifications
            self.dumps = dumps
        } catch {
            fail("cannot open rtnetlink: \(error)")
            return
        }
        requestDump()
        // The first answer is waited for here, so that the state at start is known: the kernel writes a dump's
        // datagrams as it is asked for them, without waiting for anything.
        let deadline = MonotonicClock.now() + Duration.seconds(1).nanosecondCount
        while !isIdle, let dumps, MonotonicClock.now() < deadline {
            let remaining = Duration.nanoseconds(max(0, deadline - MonotonicClock.now()))
            guard (try? dumps.fileDescriptor.poll(for: .readable, timeout: remaining))?.isEmpty == false else { break }
            dumpReadable()
        }
    }

    /// Cancels both sources and closes the sockets.
    func stop() {
        notificationSource?.cancel()
        dumpSource?.cancel()
        notificationSource = nil
        dumpSource = nil
        notifications = nil
        dumps = nil
    }

    private var isIdle: Bool {
        if case .idle = dumpState { return true }
        return false
    }

    private func fail(_ reason: String) {
        logger.warning("network: \(reason); the network condition has no source")
        stop()
        failure = reason
        let hadValue = reachability != nil
        reachability = nil
        if hadValue { changed() }
    }

    /// Starts a dump of the links (the routes follow), or marks one wanted after the dump in progress.
    private func requestDump() {
        guard isIdle else {
            isAnotherDumpWanted = true
            return
        }
        isAnotherDumpWanted = false
        send(.links, then: { .links(sequence: $0, NetworkReachability()) })
    }

    private func send(_ kind: RouteNetlink.DumpKind, then state: (UInt32) -> DumpState) {
        guard let dumps else { return }
        let sequence = nextSequence
        nextSequence &+= 1
        do {
            try dumps.sendToKernel(RouteNetlink.dumpRequest(kind, sequence: sequence))
            dumpState = state(sequence)
        } catch {
            fail("cannot ask the kernel for its \(kind == .links ? "links" : "routes"): \(error)")
        }
    }

    /// Drains the notifications: their content is not needed, only that something changed.
    private func notificationsReadable() {
        guard let notifications else { return }
        var sawChange = false
        while true {
            do {
                guard let datagram = try notifications.receive() else { break }
                if datagram.senderPort == 0 { sawChange = true }
            } catch  where error.rawValue == ENOBUFS {
                sawChange = true
            } catch {
                fail("rtnetlink notifications: \(error)")
                return
            }
        }
        if sawChange { requestDump() }
    }

    /// Reads what the dump in progress has sent so far.
    private func dumpReadable() {
        guard let dumps else { return }
        while true {
            let datagram: NetlinkSocket.Datagram
            do {
                guard let received = try dumps.receive() else { return }
                datagram = received
            } catch  where error.rawValue == ENOBUFS {
                // Part of the dump was lost: start over once it ends (or now, if the end was lost too).
                isAnotherDumpWanted = true
                dumpState = .idle
                requestDump()
                continue
            } catch {
                fail("rtnetlink dump: \(error)")
                return
            }
            guard datagram.senderPort == 0 else { continue }
            if datagram.isTruncated {
                // A message larger than the buffer: read the state again with one twice as large, up to 1 MiB
                // (far above any link or route message), never in a loop.
                guard dumps.growBuffer(limit: 1 << 20) else {
                    fail("an rtnetlink message over \(dumps.datagramCapacity) bytes")
                    return
                }
                logger.notice("network: a dump datagram was cut short; reading with \(dumps.datagramCapacity) bytes")
                dumpState = .idle
                requestDump()
                continue
            }
            for message in RouteNetlink.parse(datagram.bytes) { take(message) }
        }
    }

    private func take(_ message: RouteNetlinkMessage) {
        switch (message, dumpState) {
        case (.link(let link, let isRemoved, let sequence), .links(let current, var partial)) where sequence == current:
            if !isRemoved && partial.links.count < Self.entryLimit { partial.links[link.index] = link }
            dumpState = .links(sequence: current, partial)
        case (.route(let route, let isRemoved, let sequence), .routes(let current, var partial))
        where sequence == current:
            if !isRemoved && route.destinationLength == 0 && partial.routes.count < Self.entryLimit {
                partial.routes.append(route)
            }
            dumpState = .routes(sequence: current, partial)
        case (.done(let sequence, let isInterrupted), .links(let current, let partial)) where sequence == current:
            if isInterrupted { isAnotherDumpWanted = true }
            send(.routes, then: { .routes(sequence: $0, partial) })
        case (.done(let sequence, let isInterrupted), .routes(let current, let partial)) where sequence == current:
            if isInterrupted { isAnotherDumpWanted = true }
            dumpState = .idle
            commit(partial)
            if isAnotherDumpWanted { requestDump() }
        case (.error(let sequence, let code), .links(let current, _)) where sequence == current && code != 0,
            (.error(let sequence, let code), .routes(let current, _)) where sequence == current && code != 0:
            logger.warning("network: the kernel refused a dump: \(Errno(rawValue: -code)); trying again")
            dumpState = .idle
            isAnotherDumpWanted = false
            // EBUSY (a dump already running) or EINTR clear by themselves; anything else repeats once per
            // notification, never in a loop of its own.
            if code == -EBUSY || code == -EINTR { requestDump() }
        case (.malformed(let reason), _):
            // What follows it in the datagram is lost, maybe the dump's end: start the dump over, a few times.
            logger.warning("network: an rtnetlink message the daemon cannot read (\(reason))")
            guard !isIdle else { return }
            dumpState = .idle
            malformedRestarts += 1
            if malformedRestarts <= Self.malformedRestartLimit { requestDump() }
        default:
            break
        }
    }

    private func commit(_ state: NetworkReachability) {
        malformedRestarts = 0
        let previous = reachability
        reachability = state
        if previous?.isOnline != state.isOnline || previous?.defaultRouteInterfaces != state.defaultRouteInterfaces {
            changed()
        }
    }
}
