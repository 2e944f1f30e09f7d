// The vocabulary of BackgroundApplication: states, task identifiers, the delegate, and what observers are told.
import BGTaskJSON
import FoundationEssentials

/// Where the app stands, as `UIApplication.State` says it.
public enum ApplicationState: String, Hashable, Sendable, CustomStringConvertible {
    /// In the foreground and receiving input; background time is unlimited.
    case active
    /// In the foreground but not receiving input, on the way to or from the background.
    case inactive
    /// In the background, spending the background time budget; the daemon may suspend the app.
    case background

    /// The state for the daemon's view of the app: `suspended` is seen from inside as `background` (a suspended
    /// process runs no code), and `notRunning` or `terminated` only show in races around registration.
    init(_ state: AppState) {
        switch state {
        case .active: self = .active
        case .inactive: self = .inactive
        case .background, .suspended, .notRunning, .terminated: self = .background
        }
    }

    public var description: String { rawValue }
}

/// Names a background task begun with `beginBackgroundTask`, like `UIBackgroundTaskIdentifier`.
///
/// Identifiers belong to this process, not to the daemon: they stay valid when the client reconnects to a
/// restarted daemon and begins the lease again under a new daemon task id.
public struct BackgroundTaskIdentifier: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The identifier's number; 0 is `.invalid`, every begun task gets a positive one.
    public let rawValue: Int

    /// An identifier with the given number.
    public init(rawValue: Int) {
        self.rawValue = rawValue
    }

    /// No task: what `beginBackgroundTask` returns when the daemon refuses, like `UIBackgroundTaskInvalid`.
    public static let invalid = BackgroundTaskIdentifier(rawValue: 0)

    public var description: String { self == .invalid ? "invalid" : String(rawValue) }
}

/// What a memory warning says about the app's chances.
public struct MemoryWarning: Hashable, Sendable {
    /// Whether the app is among the likeliest to be reclaimed if memory stays short: it should shrink now.
    public var isLikelyVictim: Bool
    /// For a likely victim, its place in the reclamation order, 1 being the first to go.
    public var rank: Int?

    /// A memory warning.
    public init(isLikelyVictim: Bool, rank: Int?) {
        self.isLikelyVictim = isLikelyVictim
        self.rank = rank
    }
}

/// A notification posted to the app with `Post` (`bgtask post`).
public struct ApplicationNotification: Hashable, Sendable {
    /// The notification's name.
    public var name: String
    /// The posted payload, the latest one when posts were coalesced; nil when the post had none.
    public var payload: JSONValue?
    /// How many posts this delivery stands for: more than 1 when posts to a suspended app were coalesced.
    public var count: Int

    /// A notification.
    public init(name: String, payload: JSONValue?, count: Int) {
        self.name = name
        self.payload = payload
        self.count = count
    }
}

/// The app's lifecycle callbacks, as `UIApplicationDelegate` has them. Every method has an empty default.
///
/// Called on the application's callback queue, one event at a time, in the order the daemon sent them. The event
/// is acknowledged to the daemon when the method returns, so work done inside `applicationDidEnterBackground` is
/// covered by the enter-background grace period; longer work needs `beginBackgroundTask`.
public protocol ApplicationDelegate: AnyObject, Sendable {
    /// The app is leaving the active state (`willResignActive`); `applicationState` is still `.active`.
    func applicationWillResignActive(_ application: BackgroundApplication)
    /// The app became active (`didBecomeActive`).
    func applicationDidBecomeActive(_ application: BackgroundApplication)
    /// The app entered the background (`didEnterBackground`): save state, begin tasks for work to finish.
    func applicationDidEnterBackground(_ application: BackgroundApplication)
    /// The app is about to return to the foreground (`willEnterForeground`); it is still `.background`.
    func applicationWillEnterForeground(_ application: BackgroundApplication)
    /// Memory is short (`memoryWarning`): free what can be rebuilt.
    func applicationDidReceiveMemoryWarning(_ application: BackgroundApplication, warning: MemoryWarning)
    /// The daemon is terminating the app (`willTerminate`): it has a short grace period before SIGKILL.
    func applicationWillTerminate(_ application: BackgroundApplication)
    /// A notification was posted to the app (`notification`).
    func application(_ application: BackgroundApplication, didReceive notification: ApplicationNotification)
}

extension ApplicationDelegate {
    /// Does nothing.
    public func applicationWillResignActive(_ application: BackgroundApplication) {}
    /// Does nothing.
    public func applicationDidBecomeActive(_ application: BackgroundApplication) {}
    /// Does nothing.
    public func applicationDidEnterBackground(_ application: BackgroundApplication) {}
    /// Does nothing.
    public func applicationWillEnterForeground(_ application: BackgroundApplication) {}
    /// Does nothing.
    public func applicationDidReceiveMemoryWarning(_ application: BackgroundApplication, warning: MemoryWarning) {}
    /// Does nothing.
    public func applicationWillTerminate(_ application: BackgroundApplication) {}
    /// Does nothing.
    public func application(_ application: BackgroundApplication, didReceive notification: ApplicationNotification) {}
}

/// What happened to the application's link with the daemon, for connection observers.
public enum ConnectionEvent: Sendable, CustomStringConvertible {
    /// The event stream ended unexpectedly (the daemon stopped or restarted); reconnection starts.
    case lost(ClientError)
    /// Attempt `attempt` to register again failed; another follows after the backoff delay.
    case reconnectFailed(ClientError, attempt: Int)
    /// Registered again on attempt `attempt`; every lease still open was carried over or begun again.
    case reconnected(app: AppInfo, attempt: Int)
    /// The reconnect policy's attempts are used up: no more events will arrive.
    case gaveUp(ClientError)
    /// A call made on the app's behalf with no caller to report to (an acknowledgement, the end of a lease)
    /// failed.
    case requestFailed(method: String, ClientError)
    /// A scheduled request's task began with no launch handler registered for its identifier: it was completed
    /// as failed, not to be retried (`register(forTaskWithIdentifier:launchHandler:)`).
    case noLaunchHandler(identifier: String)

    public var description: String {
        switch self {
        case .lost(let error): "lost: \(error)"
        case .reconnectFailed(let error, let attempt): "reconnect attempt \(attempt) failed: \(error)"
        case .reconnected(let app, let attempt): "reconnected on attempt \(attempt), state \(app.state.rawValue)"
        case .gaveUp(let error): "gave up reconnecting: \(error)"
        case .requestFailed(let method, let error): "\(method) failed: \(error)"
        case .noLaunchHandler(let identifier): "no launch handler for the scheduled task \(identifier.debugDescription)"
        }
    }
}

/// How `BackgroundApplication` reconnects after losing its event stream: exponential backoff, bounded.
public struct ReconnectPolicy: Hashable, Sendable {
    /// The wait after the first failed attempt (the first attempt is made at once); it doubles after each failure.
    public var initialDelay: Duration
    /// The longest wait between attempts.
    public var maximumDelay: Duration
    /// Attempts before giving up; nil keeps trying, as an app outliving a daemon restart should.
    public var maximumAttempts: Int?

    /// 100 ms doubling up to 5 s: a restarting daemon (systemd's default `RestartSec=100ms`) is found within a
    /// few attempts, and a daemon that stays down costs one connect every 5 s.
    public init(
        initialDelay: Duration = .milliseconds(100), maximumDelay: Duration = .seconds(5), maximumAttempts: Int? = nil
    ) {
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
        self.maximumAttempts = maximumAttempts
    }
}
