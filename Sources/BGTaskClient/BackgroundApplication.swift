// The UIApplication-shaped API apps use: registration, lifecycle callbacks, background tasks, remaining time.
import BGTaskSystem
import Dispatch
import Foundation
import Synchronization

/// An app registered with bgtaskd, used the way an iOS app uses `UIApplication`.
///
/// Threads: the app holds two connections to the daemon (DESIGN §6). Its event stream (the `Register` call) is
/// read on a thread of its own, which hands each event to `callbackQueue`; there the delegate and observers run,
/// one event at a time in the daemon's order, and the event is acknowledged once they return. Calls
/// (`beginBackgroundTask`, `backgroundTimeRemaining`, acknowledgements...) go over the other connection from
/// whichever thread makes them. Every method may be called from any thread.
///
/// When the event stream ends without `close()` (the daemon restarted), the app registers again with bounded
/// exponential backoff and carries its open tasks over: the daemon re-attaches the process with its leases if it
/// kept its state, and any lease it does not know any more is begun again. Task identifiers do not change.
public final class BackgroundApplication: Sendable {
    /// How the application talks to the daemon, beyond the UIApplication-like parameters.
    public struct Options: Sendable {
        /// Acknowledge each event when its handlers return (the default). Off, `acknowledge(eventId:)` must be
        /// called, which tests use to hold a `didEnterBackground` unacknowledged.
        public var acknowledgesEventsAutomatically: Bool
        /// How long a call to the daemon waits for its reply.
        public var callTimeout: Duration?
        /// How to reconnect after the daemon went away.
        public var reconnect: ReconnectPolicy
        /// An event observer in place from the first event on (see `addEventObserver(_:)`).
        public var eventObserver: (@Sendable (EventInfo) -> Void)?
        /// A connection observer in place from the start (see `addConnectionObserver(_:)`).
        public var connectionObserver: (@Sendable (ConnectionEvent) -> Void)?

        /// Options; the defaults suit an app.
        public init(
            acknowledgesEventsAutomatically: Bool = true,
            callTimeout: Duration? = .seconds(10),
            reconnect: ReconnectPolicy = ReconnectPolicy(),
            eventObserver: (@Sendable (EventInfo) -> Void)? = nil,
            connectionObserver: (@Sendable (ConnectionEvent) -> Void)? = nil
        ) {
            self.acknowledgesEventsAutomatically = acknowledgesEventsAutomatically
            self.callTimeout = callTimeout
            self.reconnect = reconnect
            self.eventObserver = eventObserver
            self.connectionObserver = connectionObserver
        }
    }

    /// The app's name, unique among live apps.
    public let name: String
    /// The daemon's socket path.
    public let socketPath: String

    private let exitsOnSuspend: Bool?
    private let client: LifecycleClient
    /// Serial, targeting the caller's `callbackQueue`: keeps events in order whatever kind of queue that is.
    private let queue: DispatchQueue
    /// Signalled by `close()` to cut a reconnect backoff short.
    private let wakeUp = DispatchSemaphore(value: 0)
    private let state: Mutex<State>
    /// Held across every call that begins or ends a lease, and across carrying the leases over to a new
    /// registration, so that a task begun or ended during a reconnect is settled against the registration it
    /// ends up in. Taken before `state`, never while holding it.
    private let leaseOperations = Mutex(())

    /// Registers the calling process with bgtaskd as the app `name` and starts delivering its events.
    ///
    /// - Parameters:
    ///   - socketPath: the daemon's socket; nil resolves it with `DaemonSocket` (`$BGTASK_SOCKET`, else the
    ///     system daemon's).
    ///   - exitsOnSuspend: true to be terminated instead of suspended (`UIApplicationExitsOnSuspend`); nil takes
    ///     the daemon's configuration.
    ///   - launchedInBackground: start in background, for an app launched to do background work: it gets
    ///     `applicationDidEnterBackground` at once.
    ///   - delegate: the lifecycle callbacks; held weakly, as `UIApplication.delegate` is.
    ///   - callbackQueue: where callbacks and expiration handlers run; nil uses a private serial queue. Pass
    ///     `.main` for UIKit's behaviour in a program that runs the main queue (`dispatchMain()`).
    ///   - options: acknowledgement, timeouts, reconnection, observers from the first event.
    public init(
        name: String,
        socketPath: String? = nil,
        exitsOnSuspend: Bool? = nil,
        launchedInBackground: Bool = false,
        delegate: (any ApplicationDelegate)? = nil,
        callbackQueue: DispatchQueue? = nil,
        options: Options = Options()
    ) throws(ClientError) {
        let path: String
        if let socketPath {
            path = socketPath
        } else {
            path = try DaemonSocket.path(explicit: nil, user: false, environment: ProcessInfo.processInfo.environment)
        }
        self.name = name
        self.socketPath = path
        self.exitsOnSuspend = exitsOnSuspend
        client = try LifecycleClient(socketPath: path, timeout: options.callTimeout)
        let registration: Registration
        do throws(ClientError) {
            registration = try client.register(
                name: name, exitsOnSuspend: exitsOnSuspend, state: launchedInBackground ? .background : nil)
        } catch {
            client.close()
            throw error
        }
        queue = DispatchQueue(label: "io.bgtask.client.callbacks", target: callbackQueue)
        var initial = State(
            app: registration.app,
            applicationState: ApplicationState(registration.app.state),
            link: .registered(registration),
            acknowledgesAutomatically: options.acknowledgesEventsAutomatically
        )
        initial.delegate = delegate
        if let observer = options.eventObserver { _ = initial.addEventObserver(observer) }
        if let observer = options.connectionObserver { _ = initial.addConnectionObserver(observer) }
        state = Mutex(initial)
        let weakSelf = WeakReference(self)
        let wakeUp = wakeUp
        let policy = options.reconnect
        let thread = Thread {
            BackgroundApplication.readEvents(
                application: weakSelf, registration: registration, wakeUp: wakeUp, policy: policy)
        }
        thread.name = "bgtask-events"
        thread.start()
    }

    deinit {
        close()
    }

    // MARK: UIApplication

    /// The lifecycle callbacks; held weakly, as `UIApplication.delegate` is.
    public var delegate: (any ApplicationDelegate)? {
        get { state.withLock { $0.delegate } }
        set { state.withLock { $0.delegate = newValue } }
    }

    /// Where the app stands, as of the last event handled on the callback queue.
    public var applicationState: ApplicationState {
        state.withLock { $0.applicationState }
    }

    /// Seconds of background time left, asked of the daemon; `.greatestFiniteMagnitude` in the foreground, as on
    /// iOS. When the daemon cannot be asked (it is restarting), an estimate from the last answer.
    public var backgroundTimeRemaining: TimeInterval {
        if isRegistered {
            do throws(ClientError) {
                let seconds = try client.backgroundTimeRemaining(app: name)
                let now = MonotonicClock.now()
                state.withLock { $0.lastRemaining = seconds.map { (seconds: $0, measuredAt: now) } }
                return seconds ?? .greatestFiniteMagnitude
            } catch {
                // The estimate below is the answer when the daemon cannot give one.
            }
        }
        return state.withLock { (state: inout State) -> TimeInterval in
            guard state.applicationState == .background else { return .greatestFiniteMagnitude }
            guard let last = state.lastRemaining else { return 0 }
            let elapsed = Double(MonotonicClock.now() - last.measuredAt) / 1e9
            return max(0, last.seconds - elapsed)
        }
    }

    /// Begins a background task named `taskName`, like UIApplication's
    /// `beginBackgroundTask(withName:expirationHandler:)`.
    ///
    /// Returns `.invalid` when the daemon refuses, such as `BackgroundTimeExhausted` in background with no time
    /// left. `handler` runs on the callback queue, at most once, when the background time is about to run out
    /// (or the lease cannot be begun again after a daemon restart); it should stop the work and call
    /// `endBackgroundTask(_:)`. While the daemon is being reconnected to, the task is recorded and its lease
    /// begun once registered again.
    public func beginBackgroundTask(
        withName taskName: String?, expirationHandler handler: (@Sendable () -> Void)? = nil
    ) -> BackgroundTaskIdentifier {
        leaseOperations.withLock { _ in
            let (identifier, isRegistered) = state.withLock {
                (state: inout State) -> (BackgroundTaskIdentifier, Bool) in
                guard state.link.isAlive else { return (.invalid, false) }
                let identifier = BackgroundTaskIdentifier(rawValue: state.nextTaskNumber)
                state.nextTaskNumber += 1
                state.leases[identifier] = Lease(name: taskName, expirationHandler: handler)
                return (identifier, state.link.isRegistered)
            }
            // While reconnecting, the task waits as pending; the reconnection begins its lease.
            guard identifier != .invalid, isRegistered else { return identifier }
            do throws(ClientError) {
                let taskId = try client.beginBackgroundTask(app: name, name: taskName)
                record(taskId: taskId, for: identifier)
                return identifier
            } catch  where error.isTransportFailure {
                // The daemon is out of reach. If the event stream broke too, reconnection is under way (waiting
                // for this lock) and will begin the lease; if only this connection failed, the task cannot be
                // promised.
                return state.withLock { (state: inout State) -> BackgroundTaskIdentifier in
                    if state.link.isRegistered || !state.link.isAlive {
                        state.leases[identifier] = nil
                        return .invalid
                    }
                    return identifier
                }
            } catch {
                state.withLock { _ = $0.leases.removeValue(forKey: identifier) }
                return .invalid
            }
        }
    }

    /// Begins an unnamed background task, like `UIApplication.beginBackgroundTask(expirationHandler:)`.
    public func beginBackgroundTask(expirationHandler handler: (@Sendable () -> Void)? = nil)
        -> BackgroundTaskIdentifier
    {
        beginBackgroundTask(withName: nil, expirationHandler: handler)
    }

    /// Ends a background task, like `UIApplication.endBackgroundTask(_:)`. Ending `.invalid` or a task already
    /// ended does nothing.
    public func endBackgroundTask(_ identifier: BackgroundTaskIdentifier) {
        leaseOperations.withLock { _ in
            let (taskId, isRegistered) = state.withLock { (state: inout State) -> (Int?, Bool) in
                guard let lease = state.leases.removeValue(forKey: identifier) else { return (nil, false) }
                return (lease.taskId, state.link.isRegistered)
            }
            // Without a link the lease is settled by the reconnection: a re-attached registration's leases that
            // no task claims are ended then.
            guard let taskId, isRegistered else { return }
            endLease(taskId: taskId)
        }
    }

    /// Ends the registration: the daemon ends every lease of the app and marks it exited once the process is
    /// gone. No callback runs after this returns, except one already running. Safe to call more than once.
    public func close() {
        let registration = state.withLock { (state: inout State) -> Registration? in
            defer {
                state.link = .closed
                state.leases = [:]
            }
            if case .registered(let registration) = state.link { return registration }
            return nil
        }
        wakeUp.signal()
        registration?.close()
        client.close()
    }

    // MARK: Beyond UIApplication

    /// The app as the daemon described it at the last registration.
    public var registeredApp: AppInfo {
        state.withLock { $0.app }
    }

    /// How many times the app registered again after losing the daemon.
    public var reconnectCount: Int {
        state.withLock { $0.reconnectCount }
    }

    /// The identifiers of the tasks begun and not ended yet.
    public var openBackgroundTasks: Set<BackgroundTaskIdentifier> {
        state.withLock { Set($0.leases.keys) }
    }

    /// Whether events are acknowledged when their handlers return; see `Options.acknowledgesEventsAutomatically`.
    public var acknowledgesEventsAutomatically: Bool {
        get { state.withLock { $0.acknowledgesAutomatically } }
        set { state.withLock { $0.acknowledgesAutomatically = newValue } }
    }

    /// Acknowledges the event `eventId`, for apps that turned automatic acknowledgement off.
    public func acknowledge(eventId: Int) throws(ClientError) {
        guard state.withLock({ $0.link.isAlive }) else { throw .disconnected }
        try client.acknowledge(app: name, eventId: eventId)
    }

    /// Adds `observer`, called on the callback queue with every event handled from now on, before the delegate.
    @discardableResult
    public func addEventObserver(_ observer: @escaping @Sendable (EventInfo) -> Void) -> ObserverToken {
        state.withLock { $0.addEventObserver(observer) }
    }

    /// Adds `observer`, called on the callback queue when the link with the daemon is lost, fails to come back,
    /// comes back, or a call made on the app's behalf fails.
    @discardableResult
    public func addConnectionObserver(_ observer: @escaping @Sendable (ConnectionEvent) -> Void) -> ObserverToken {
        state.withLock { $0.addConnectionObserver(observer) }
    }

    /// Removes an observer added with `addEventObserver(_:)` or `addConnectionObserver(_:)`.
    public func removeObserver(_ token: ObserverToken) {
        state.withLock { state in
            state.eventObservers[token] = nil
            state.connectionObservers[token] = nil
        }
    }

    // MARK: Events

    private var isRegistered: Bool { state.withLock { $0.link.isRegistered } }

    /// Hands an event read by the event thread to the callback queue.
    private func receive(_ event: EventInfo) {
        queue.async { self.handle(event) }
    }

    /// Runs an event's callbacks on the callback queue, then acknowledges it.
    private func handle(_ event: EventInfo) {
        let (delegate, observers, isOpen) = state.withLock {
            (state: inout State) -> ((any ApplicationDelegate)?, [@Sendable (EventInfo) -> Void], Bool) in
            (state.delegate, state.eventObservers.sorted { $0.key < $1.key }.map(\.value), state.link.isAlive)
        }
        guard isOpen else { return }
        // UIKit's timing: a did* callback sees the state entered, a will* callback the state being left.
        switch event.kind {
        case .didBecomeActive: setApplicationState(.active)
        case .didEnterBackground: setApplicationState(.background)
        default: break
        }
        for observer in observers { observer(event) }
        switch event.kind {
        case .willResignActive:
            delegate?.applicationWillResignActive(self)
            setApplicationState(.inactive)
        case .didBecomeActive:
            delegate?.applicationDidBecomeActive(self)
        case .didEnterBackground:
            delegate?.applicationDidEnterBackground(self)
        case .willEnterForeground:
            delegate?.applicationWillEnterForeground(self)
            setApplicationState(.inactive)
        case .backgroundTaskExpiring:
            runExpirationHandlers(taskIds: event.taskIds ?? [])
        case .memoryWarning:
            let warning = MemoryWarning(isLikelyVictim: event.likelyVictim ?? false, rank: event.rank)
            delegate?.applicationDidReceiveMemoryWarning(self, warning: warning)
        case .willTerminate:
            delegate?.applicationWillTerminate(self)
        case .notification:
            let notification = ApplicationNotification(
                name: event.name ?? "", payload: event.payload.map(JSONValue.object), count: event.count ?? 1)
            delegate?.application(self, didReceive: notification)
        }
        let shouldAcknowledge = state.withLock { $0.acknowledgesAutomatically && $0.link.isAlive }
        guard shouldAcknowledge else { return }
        do throws(ClientError) {
            try client.acknowledge(app: name, eventId: event.id)
        } catch {
            notify(.requestFailed(method: AcknowledgeParameters.methodName, error))
        }
    }

    private func setApplicationState(_ applicationState: ApplicationState) {
        state.withLock { $0.applicationState = applicationState }
    }

    /// Runs, once each, the expiration handlers of the tasks the daemon listed as expiring.
    private func runExpirationHandlers(taskIds: [Int]) {
        let handlers = state.withLock { (state: inout State) -> [@Sendable () -> Void] in
            var handlers: [@Sendable () -> Void] = []
            for taskId in taskIds {
                guard let identifier = state.identifier(forTaskId: taskId) else {
                    // A lease whose BeginBackgroundTask reply is still on its way: its handler runs when it lands.
                    state.expiringUnclaimed.insert(taskId)
                    continue
                }
                if let handler = state.takeExpirationHandler(identifier) { handlers.append(handler) }
            }
            return handlers
        }
        for handler in handlers { handler() }
    }

    /// Records the daemon's id for a task whose lease just began; ends the lease if the task ended meanwhile.
    /// Called with `leaseOperations` held.
    private func record(taskId: Int, for identifier: BackgroundTaskIdentifier) {
        enum Outcome { case recorded, expiring(@Sendable () -> Void), orphaned, closed }
        let outcome = state.withLock { (state: inout State) -> Outcome in
            guard state.link.isAlive else { return .closed }
            guard state.leases[identifier] != nil else { return .orphaned }
            state.leases[identifier]?.taskId = taskId
            if state.expiringUnclaimed.remove(taskId) != nil, let handler = state.takeExpirationHandler(identifier) {
                return .expiring(handler)
            }
            return .recorded
        }
        switch outcome {
        case .recorded, .closed: break
        case .expiring(let handler): queue.async { handler() }
        case .orphaned: endLease(taskId: taskId)
        }
    }

    private func endLease(taskId: Int) {
        do throws(ClientError) {
            try client.endBackgroundTask(app: name, taskId: taskId)
        } catch .lifecycle(.noSuchTask) {
            // Already over on the daemon's side (it expired, or the registration that held it ended).
        } catch {
            notify(.requestFailed(method: EndBackgroundTaskParameters.methodName, error))
        }
    }

    private func notify(_ event: ConnectionEvent) {
        let observers = state.withLock { $0.connectionObservers.sorted { $0.key < $1.key }.map(\.value) }
        guard !observers.isEmpty else { return }
        queue.async {
            for observer in observers { observer(event) }
        }
    }

    // MARK: Event thread

    /// The body of the event thread: reads events until the stream ends, then reconnects, until closed.
    ///
    /// It holds the application only while handling something, never while blocked, so dropping the last
    /// reference to an application that was not closed still closes it (in `deinit`) and ends this thread.
    private static func readEvents(
        application: WeakReference<BackgroundApplication>,
        registration first: Registration,
        wakeUp: DispatchSemaphore,
        policy: ReconnectPolicy
    ) {
        var registration = first
        while true {
            var ending = ClientError.disconnected
            do throws(ClientError) {
                while let event = try registration.nextEvent() {
                    guard let app = application.value else {
                        registration.close()
                        return
                    }
                    app.receive(event)
                }
            } catch {
                ending = error
            }
            registration.close()
            guard let app = application.value, app.connectionLost(ending) else { return }
            var attempt = 0
            var delay = policy.initialDelay
            var lastError = ending
            while true {
                attempt += 1
                if attempt > 1 {
                    // A signal means close() was called; the attempt below then sees the closed link and stops.
                    _ = wakeUp.wait(timeout: .now() + .nanoseconds(Int(clamping: delay.nanosecondsClamped)))
                    delay = min(delay * 2, policy.maximumDelay)
                }
                guard let app = application.value else { return }
                switch app.reconnect(attempt: attempt) {
                case .stop:
                    return
                case .registered(let next):
                    registration = next
                case .failed(let error):
                    lastError = error
                    if let maximum = policy.maximumAttempts, attempt >= maximum {
                        app.giveUp(lastError)
                        return
                    }
                    continue
                }
                break
            }
        }
    }

    /// Marks the link lost; false when the application was closed, so nothing is to be done.
    private func connectionLost(_ error: ClientError) -> Bool {
        let isOpen = state.withLock { (state: inout State) -> Bool in
            guard state.link.isAlive else { return false }
            state.link = .reconnecting
            return true
        }
        if isOpen { notify(.lost(error)) }
        return isOpen
    }

    private enum ReconnectOutcome {
        case registered(Registration)
        case failed(ClientError)
        case stop
    }

    /// One attempt to register again and carry the open tasks over.
    private func reconnect(attempt: Int) -> ReconnectOutcome {
        let (isOpen, wasInBackground) = state.withLock { ($0.link.isAlive, $0.applicationState == .background) }
        guard isOpen else { return .stop }
        let registration: Registration
        do throws(ClientError) {
            // A fresh registration starts where the app was: in background it gets didEnterBackground and the
            // grace period again, rather than being taken for a foreground app.
            registration = try client.register(
                name: name, exitsOnSuspend: exitsOnSuspend, state: wasInBackground ? .background : nil)
        } catch {
            notify(.reconnectFailed(error, attempt: attempt))
            return .failed(error)
        }
        let isRegistered: Bool
        do throws(ClientError) {
            isRegistered = try leaseOperations.withLock { _ throws(ClientError) -> Bool in
                try carryLeasesOver(to: registration)
            }
        } catch {
            registration.close()
            notify(.reconnectFailed(error, attempt: attempt))
            return .failed(error)
        }
        guard isRegistered else {
            registration.close()
            return .stop
        }
        notify(.reconnected(app: registration.app, attempt: attempt))
        return .registered(registration)
    }

    /// Makes the daemon's leases match the open tasks after registering again, then marks the link registered;
    /// false when the application was closed meanwhile. Called with `leaseOperations` held.
    ///
    /// A re-attached registration keeps its leases: tasks whose lease it lists keep it, and listed leases no task
    /// claims (tasks ended while the link was down) are ended. Every other open task has its lease begun again;
    /// one the daemon refuses has its expiration handler run, since its work is no longer covered.
    private func carryLeasesOver(to registration: Registration) throws(ClientError) -> Bool {
        let kept = Set(registration.app.tasks.map(\.id))
        let unclaimed = state.withLock { (state: inout State) -> [Int] in
            var claimed = Set<Int>()
            for (identifier, lease) in state.leases {
                guard let taskId = lease.taskId else { continue }
                if kept.contains(taskId) {
                    claimed.insert(taskId)
                } else {
                    state.leases[identifier]?.taskId = nil
                }
            }
            state.expiringUnclaimed = []
            return kept.subtracting(claimed).sorted()
        }
        for taskId in unclaimed {
            do throws(ClientError) {
                try client.endBackgroundTask(app: name, taskId: taskId)
            } catch .lifecycle(.noSuchTask) {
                // Gone already: nothing to end.
            }
        }
        var attempted = Set<BackgroundTaskIdentifier>()
        while true {
            enum Step { case begin(BackgroundTaskIdentifier, String?), registered, closed }
            let step = state.withLock { (state: inout State) -> Step in
                guard state.link.isAlive else { return .closed }
                let pending = state.leases.filter { $0.value.taskId == nil && !attempted.contains($0.key) }
                if let (identifier, lease) = pending.min(by: { $0.key.rawValue < $1.key.rawValue }) {
                    return .begin(identifier, lease.name)
                }
                // No task left without a lease: from here on, calls go to this registration.
                state.link = .registered(registration)
                state.app = registration.app
                state.applicationState = ApplicationState(registration.app.state)
                state.reconnectCount += 1
                return .registered
            }
            switch step {
            case .closed:
                return false
            case .registered:
                return true
            case .begin(let identifier, let taskName):
                attempted.insert(identifier)
                do throws(ClientError) {
                    let taskId = try client.beginBackgroundTask(app: name, name: taskName)
                    record(taskId: taskId, for: identifier)
                } catch  where !error.isTransportFailure {
                    let handler = state.withLock { $0.takeExpirationHandler(identifier) }
                    if let handler { queue.async { handler() } }
                }
            }
        }
    }

    private func giveUp(_ error: ClientError) {
        let wasOpen = state.withLock { (state: inout State) -> Bool in
            guard state.link.isAlive else { return false }
            state.link = .gaveUp
            state.leases = [:]
            return true
        }
        if wasOpen { notify(.gaveUp(error)) }
    }
}

/// Identifies an observer added to a `BackgroundApplication`, for `removeObserver(_:)`.
public struct ObserverToken: Hashable, Comparable, Sendable {
    let number: Int

    public static func < (lhs: ObserverToken, rhs: ObserverToken) -> Bool { lhs.number < rhs.number }
}

/// A background task as the client tracks it.
private struct Lease {
    /// The name given when it began.
    var name: String?
    /// The daemon's task id; nil while the lease is not held (being begun, or to be begun after a reconnect).
    var taskId: Int?
    /// Taken (set to nil) when it runs, so it runs at most once.
    var expirationHandler: (@Sendable () -> Void)?
}

/// The link between the application and the daemon.
private enum Link {
    /// Registered; events arrive on this registration's stream.
    case registered(Registration)
    /// The stream ended unexpectedly; the event thread is registering again.
    case reconnecting
    /// Reconnection gave up.
    case gaveUp
    /// `close()` was called.
    case closed

    var isRegistered: Bool {
        if case .registered = self { return true }
        return false
    }

    /// Registered or on the way back to it.
    var isAlive: Bool {
        switch self {
        case .registered, .reconnecting: true
        case .gaveUp, .closed: false
        }
    }
}

/// Everything `BackgroundApplication` changes after `init`, behind one lock.
private struct State {
    var app: AppInfo
    var applicationState: ApplicationState
    var link: Link
    var acknowledgesAutomatically: Bool
    weak var delegate: (any ApplicationDelegate)?
    var leases: [BackgroundTaskIdentifier: Lease] = [:]
    var nextTaskNumber = 1
    /// Daemon task ids listed by `backgroundTaskExpiring` before their `BeginBackgroundTask` reply was recorded.
    var expiringUnclaimed: Set<Int> = []
    var lastRemaining: (seconds: Double, measuredAt: Int64)?
    var reconnectCount = 0
    var eventObservers: [ObserverToken: @Sendable (EventInfo) -> Void] = [:]
    var connectionObservers: [ObserverToken: @Sendable (ConnectionEvent) -> Void] = [:]
    var nextObserverNumber = 1

    init(app: AppInfo, applicationState: ApplicationState, link: Link, acknowledgesAutomatically: Bool) {
        self.app = app
        self.applicationState = applicationState
        self.link = link
        self.acknowledgesAutomatically = acknowledgesAutomatically
    }

    mutating func addEventObserver(_ observer: @escaping @Sendable (EventInfo) -> Void) -> ObserverToken {
        let token = ObserverToken(number: nextObserverNumber)
        nextObserverNumber += 1
        eventObservers[token] = observer
        return token
    }

    mutating func addConnectionObserver(_ observer: @escaping @Sendable (ConnectionEvent) -> Void) -> ObserverToken {
        let token = ObserverToken(number: nextObserverNumber)
        nextObserverNumber += 1
        connectionObservers[token] = observer
        return token
    }

    func identifier(forTaskId taskId: Int) -> BackgroundTaskIdentifier? {
        leases.first { $0.value.taskId == taskId }?.key
    }

    /// The task's expiration handler, removed so that it cannot run twice; nil when it ran or there is none.
    mutating func takeExpirationHandler(_ identifier: BackgroundTaskIdentifier) -> (@Sendable () -> Void)? {
        defer { leases[identifier]?.expirationHandler = nil }
        return leases[identifier]?.expirationHandler
    }
}

/// A weak reference that can cross threads; the referenced object is itself `Sendable`.
private final class WeakReference<Object: AnyObject & Sendable>: Sendable {
    /// The object, or nil once it was deallocated.
    weak let value: Object?

    init(_ value: Object) {
        self.value = value
    }
}
