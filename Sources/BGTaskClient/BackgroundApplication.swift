// The UIApplication-shaped API apps use: registration, lifecycle callbacks, background tasks, remaining time.
import BGTaskPOSIX
import Dispatch
import FoundationEssentials
import Synchronization

/// An app registered with bgtaskd, used the way an iOS app uses `UIApplication`.
///
/// Threads: the app holds two connections to the daemon (docs/CLIENT.md). Its event stream (the `Register` call) is
/// read on a thread of its own, which hands each event to `callbackQueue`; there the delegate and observers run,
/// one event at a time in the daemon's order, and the event is acknowledged once they return. Calls
/// (`beginBackgroundTask`, `backgroundTimeRemaining`, acknowledgements...) go over the other connection from
/// whichever thread makes them. Every method may be called from any thread.
///
/// When the event stream ends without `close()` (the daemon restarted), the app registers again with bounded
/// exponential backoff and carries its open tasks over: the daemon re-attaches the process with its leases (it
/// keeps them across restarts); a task whose lease it lost expires instead of being begun again, which would be a
/// fresh budget. Task identifiers do not change.
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

    let exitsOnSuspend: Bool?
    let client: LifecycleClient
    /// Serial, targeting the caller's `callbackQueue`: keeps events in order whatever kind of queue that is.
    let queue: DispatchQueue
    /// Signalled by `close()` to cut a reconnect backoff short.
    let wakeUp = DispatchSemaphore(value: 0)
    let state: Mutex<State>
    /// Held across every call that begins or ends a lease, and across carrying the leases over to a new
    /// registration, so that a task begun or ended during a reconnect is settled against the registration it
    /// ends up in. Taken before `state`, never while holding it.
    let leaseOperations = Mutex(())

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
        do {
            try DetachedThread.start(name: "bgtask-events") {
                BackgroundApplication.readEvents(
                    application: weakSelf, registration: registration, wakeUp: wakeUp, policy: policy)
            }
        } catch {
            // No thread for the event stream (the process is out of threads): the registration ends with it.
            registration.close()
            client.close()
            throw ClientError.io(error)
        }
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

}
