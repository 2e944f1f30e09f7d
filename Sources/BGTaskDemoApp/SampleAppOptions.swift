// The sample app's command line: its name, its daemon, and what it does once sent to the background.
import Foundation

/// What `bgtask-demo-app` was asked to be: parsed from its arguments.
public struct SampleAppOptions: Hashable, Sendable {
    /// What the app does when it enters the background.
    public enum BackgroundWork: Hashable, Sendable {
        /// Nothing: it has no work to finish, so it is suspended at once.
        case nothing
        /// A background task that ends by itself after this long: an upload that finishes in time.
        case finite(Duration)
        /// A background task that never ends and ignores its expiration handler: a misbehaving app.
        case forever
    }

    /// The app's name, unique among live apps (`--name`).
    public var name: String
    /// The daemon's socket (`--socket`).
    public var socketPath: String
    /// What it does in background (`--work SECONDS`, `--work-forever`).
    public var work: BackgroundWork = .nothing
    /// The background task's name (`--task NAME`).
    public var taskName = "work"
    /// MiB it allocates, and touches, when its background work starts (`--allocate MIB`).
    public var allocationMebibytes = 0
    /// How often the work reports `backgroundTimeRemaining` (`--report-every SECONDS`).
    public var reportInterval: Duration = .milliseconds(800)
    /// The app exits by itself after this long (`--lifetime SECONDS`), so it never outlives a demo that lost
    /// track of it.
    public var lifetime: Duration = .seconds(120)
    /// A processing request the app submits once registered, needing external power, with a launch handler that
    /// works until told to stop (`--scheduled ID`); nil: none.
    public var scheduledIdentifier: String?

    /// The usage line.
    public static let usage = """
        usage: bgtask-demo-app --name NAME --socket PATH [--work SECONDS | --work-forever] [--task NAME] \
        [--allocate MIB] [--report-every SECONDS] [--lifetime SECONDS] [--scheduled ID]
        """

    /// Options with the required values and every default.
    public init(name: String, socketPath: String) {
        self.name = name
        self.socketPath = socketPath
    }

    /// Parses the arguments (without the program name).
    public static func parse(_ arguments: [String]) throws(SampleAppUsageError) -> SampleAppOptions {
        var name: String?
        var socketPath: String?
        var work = BackgroundWork.nothing
        var taskName: String?
        var allocation = 0
        var report: Duration?
        var lifetime: Duration?
        var scheduled: String?
        var remaining = arguments[...]
        func value(_ option: String) throws(SampleAppUsageError) -> String {
            guard let value = remaining.popFirst(), !value.isEmpty else {
                throw SampleAppUsageError("\(option) needs a value")
            }
            return value
        }
        func seconds(_ option: String) throws(SampleAppUsageError) -> Duration {
            let text = try value(option)
            guard let seconds = Double(text), seconds.isFinite, seconds > 0, seconds < 86_400 else {
                throw SampleAppUsageError("\(option) takes a positive number of seconds, not \(text)")
            }
            return .milliseconds(Int64((seconds * 1_000).rounded()))
        }
        while let argument = remaining.popFirst() {
            switch argument {
            case "--name": name = try value(argument)
            case "--socket": socketPath = try value(argument)
            case "--work": work = .finite(try seconds(argument))
            case "--work-forever": work = .forever
            case "--task": taskName = try value(argument)
            case "--report-every": report = try seconds(argument)
            case "--lifetime": lifetime = try seconds(argument)
            case "--scheduled": scheduled = try value(argument)
            case "--allocate":
                let text = try value(argument)
                // Up to 4 GiB: enough to cross any sensible AppsMemoryMax, too little to be a typo's disaster.
                guard let mebibytes = Int(text), (1...4_096).contains(mebibytes) else {
                    throw SampleAppUsageError("--allocate takes MiB from 1 to 4096, not \(text)")
                }
                allocation = mebibytes
            default:
                throw SampleAppUsageError("unknown argument \(argument)")
            }
        }
        guard let name else { throw SampleAppUsageError("--name is required") }
        guard let socketPath else { throw SampleAppUsageError("--socket is required") }
        var options = SampleAppOptions(name: name, socketPath: socketPath)
        options.work = work
        options.allocationMebibytes = allocation
        if let taskName { options.taskName = taskName }
        if let report { options.reportInterval = report }
        if let lifetime { options.lifetime = lifetime }
        options.scheduledIdentifier = scheduled
        return options
    }
}

/// A command line the sample app cannot run with.
public struct SampleAppUsageError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What is wrong.
    public var message: String

    /// An error saying `message`.
    public init(_ message: String) {
        self.message = message
    }

    public var description: String { message }
}
