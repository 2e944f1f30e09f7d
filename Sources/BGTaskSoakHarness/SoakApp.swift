// The soak's synthetic app (`bgtask-soak app ...`): a BackgroundApplication with seeded random behaviour.

import BGTaskClient
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSeededRandom
import Dispatch
import Glibc
import Synchronization

/// How one synthetic app misbehaves, if it does; the harness picks it from the run's seed.
public enum SoakBehaviour: String, CaseIterable, Sendable {
    /// Begins a task of random length on entering background and ends it, at the latest in its expiration
    /// handler.
    case wellBehaved = "well-behaved"
    /// Begins a task longer than its budget and ignores the expiration handler: the daemon ends it
    /// (`task-expired`).
    case ignoresExpiration = "ignores-expiration"
    /// Blocks in `applicationDidEnterBackground` past `EnterBackgroundGraceSec`: never acknowledged in time.
    case hangsInBackground = "hangs-in-background"
    /// Aborts at a random moment (`crashed`).
    case crashes
    /// Exits with status 0 at a random moment (`exited`).
    case exits
    /// Registers and never reads its event stream.
    case neverReads = "never-reads"
    /// Takes a file lock on entering background and holds it a while (`suspended-holding-lock` or a deferral).
    case holdsLock = "holds-lock"
    /// Begins and ends tasks back to back as fast as the daemon answers: the client the harness kills mid-call.
    case hammers

    /// Whether the harness submits scheduled requests for an app of this behaviour: one that reads its events and
    /// never blocks its callback queue, so that what it records of its scheduled tasks is on time.
    var takesScheduledWork: Bool {
        switch self {
        case .wellBehaved, .ignoresExpiration, .crashes, .exits, .holdsLock: true
        case .hangsInBackground, .neverReads, .hammers: false
        }
    }

    /// The behaviours slots are given, with their weights in percent.
    static let weighted: [(SoakBehaviour, Int)] = [
        (.wellBehaved, 55), (.ignoresExpiration, 10), (.hangsInBackground, 7), (.crashes, 7), (.exits, 7),
        (.neverReads, 5), (.holdsLock, 9),
    ]
}

/// The `app` mode's options: `--name NAME` (else `$BGTASK_APP_NAME`, as a launched app), `--socket PATH` (else
/// `$BGTASK_SOCKET`), `--seed N`, `--behaviour B`, `--lifetime SECONDS`, `--alloc-max-mib N`, `--apps N` (the
/// peers `soak-0` ... to post to), `--background-time SECONDS`, `--lock-directory PATH`, `--parent PID`,
/// `--memory-log DIRECTORY` (where it logs the memory it maps and frees: `AllocationLog`), `--scheduled-log
/// DIRECTORY` (where it records its scheduled tasks: `ScheduledWork`).
public struct SoakAppOptions: Sendable {
    var name: String?
    var socketPath: String?
    var seed: UInt64 = 1
    var behaviour: SoakBehaviour = .wellBehaved
    var lifetimeSeconds: UInt32 = 60
    var allocationMaximumBytes = 0
    var peerCount = 0
    var backgroundTime: Duration = .seconds(10)
    var lockDirectory = "/tmp"
    var parent: pid_t?
    var memoryLogDirectory: String?
    var scheduledLogDirectory: String?

    /// Parses the arguments after `app`; nil when they are not a valid set.
    public init?(arguments: [String]) {
        var remaining = arguments[...]
        while let option = remaining.popFirst() {
            guard let value = remaining.popFirst() else { return nil }
            switch option {
            case "--name": name = value
            case "--socket": socketPath = value
            case "--seed": guard let seed = UInt64(value) else { return nil }; self.seed = seed
            case "--behaviour":
                guard let behaviour = SoakBehaviour(rawValue: value) else { return nil }
                self.behaviour = behaviour
            case "--lifetime":
                guard let seconds = UInt32(value), seconds > 0 else { return nil }; lifetimeSeconds = seconds
            case "--alloc-max-mib":
                guard let mib = Int(value), mib >= 0 else { return nil }; allocationMaximumBytes = mib << 20
            case "--apps": guard let count = Int(value), count >= 0 else { return nil }; peerCount = count
            case "--background-time":
                guard let seconds = Int(value), seconds > 0 else { return nil }; backgroundTime = .seconds(seconds)
            case "--lock-directory": lockDirectory = value
            case "--parent": guard let pid = pid_t(value) else { return nil }; parent = pid
            case "--memory-log": memoryLogDirectory = value
            case "--scheduled-log": scheduledLogDirectory = value
            default: return nil
            }
        }
    }

    /// The command line that gives these choices, after the executable.
    static func arguments(
        name: String?, socketPath: String?, seed: UInt64, behaviour: SoakBehaviour, lifetime: Duration,
        allocationMaximumMiB: Int, peerCount: Int, backgroundTime: Duration, lockDirectory: String, parent: pid_t?,
        memoryLogDirectory: String? = nil, scheduledLogDirectory: String? = nil
    ) -> [String] {
        var arguments = ["app"]
        if let name { arguments += ["--name", name] }
        if let socketPath { arguments += ["--socket", socketPath] }
        arguments += [
            "--seed", String(seed), "--behaviour", behaviour.rawValue, "--lifetime",
            String(lifetime.components.seconds), "--alloc-max-mib", String(allocationMaximumMiB), "--apps",
            String(peerCount), "--background-time", String(backgroundTime.components.seconds), "--lock-directory",
            lockDirectory,
        ]
        if let parent { arguments += ["--parent", String(parent)] }
        if let memoryLogDirectory { arguments += ["--memory-log", memoryLogDirectory] }
        if let scheduledLogDirectory { arguments += ["--scheduled-log", scheduledLogDirectory] }
        return arguments
    }
}

/// The synthetic app itself.
public enum SoakApp {
    /// Runs the app until its lifetime ends, it crashes or exits by design, or the daemon ends it; the exit status.
    public static func run(_ options: SoakAppOptions) -> Int32 {
        // Bounded lifetime whatever happens; no core dumps from the crashes it stages.
        alarm(options.lifetimeSeconds)
        var noCore = rlimit(rlim_cur: 0, rlim_max: 0)
        setrlimit(__rlimit_resource_t(RLIMIT_CORE.rawValue), &noCore)
        let environment = ProcessEnvironment.current()
        guard let name = options.name ?? environment["BGTASK_APP_NAME"],
            let socketPath = options.socketPath ?? environment["BGTASK_SOCKET"]
        else {
            say("app: no --name/--socket and no BGTASK_APP_NAME/BGTASK_SOCKET")
            return 64
        }
        if let parent = options.parent { watchParent(parent) }
        var random = SeededGenerator(seed: options.seed)
        let calls: LifecycleClient
        do {
            calls = try LifecycleClient(socketPath: socketPath, timeout: .seconds(10))
        } catch {
            say("app \(name): cannot connect: \(error)")
            return 1
        }
        let behaviour = options.behaviour
        let delegate = SoakAppDelegate(options: options, seed: random.childSeed())
        var application: BackgroundApplication?
        var unreadRegistration: Registration?
        // Held until the launch handlers are in place: a runScheduledTask may be the first event, and one with no
        // handler would be completed as failed.
        let callbacks = DispatchQueue(label: "soak-app-callbacks")
        callbacks.suspend()
        do {
            if behaviour == .neverReads {
                unreadRegistration = try calls.register(name: name)
            } else {
                let started = try BackgroundApplication(
                    name: name, socketPath: socketPath, delegate: delegate, callbackQueue: callbacks)
                application = started
                if let directory = options.scheduledLogDirectory {
                    ScheduledWork(directory: directory, app: name, seed: random.childSeed()).register(on: started)
                }
            }
            callbacks.resume()
        } catch {
            callbacks.resume()
            say("app \(name): cannot register: \(error)")
            return 1
        }
        say("registered \(name) \(behaviour.rawValue)")
        let memory = AppMemory(
            maximumBytes: options.allocationMaximumBytes,
            log: options.memoryLogDirectory.flatMap { AllocationLog(directory: $0, app: name) })
        let endAt: Int64? =
            behaviour == .crashes || behaviour == .exits
            ? MonotonicClock.now() + Duration.seconds(Int.random(in: 5...40, using: &random)).nanosecondCount : nil
        if behaviour == .hammers, let application {
            while true {
                application.endBackgroundTask(application.beginBackgroundTask(withName: "hammer"))
                _ = try? calls.getApp(name)
            }
        }
        while true {
            usleep(UInt32(Int.random(in: 300...2_500, using: &random)) * 1000)
            if let endAt, MonotonicClock.now() >= endAt {
                if behaviour == .crashes { abort() }
                exit(0)
            }
            switch Int.random(in: 0..<10, using: &random) {
            case 0..<4: memory.change(&random)
            case 4..<6 where options.peerCount > 0:
                let peer = "soak-\(Int.random(in: 0..<options.peerCount, using: &random))"
                let behavior = DeliveryBehavior.allCases.randomElement(using: &random)
                _ = try? calls.post(name: "soak.ping", payload: ["from": .string(name)], behavior: behavior, app: peer)
            case 6:
                // A short task begun and ended in whatever state the app is in.
                if let application {
                    let task = application.beginBackgroundTask(withName: "short")
                    usleep(UInt32(Int.random(in: 10...200, using: &random)) * 1000)
                    application.endBackgroundTask(task)
                }
            default: break
            }
            _ = unreadRegistration
        }
    }

    /// Exits when the parent `pid` is gone (the process is reparented): the harness's own apps never outlive it.
    private static func watchParent(_ pid: pid_t) {
        try? DetachedThread.start(name: "parent-watch") {
            while getppid() == pid { sleep(1) }
            exit(0)
        }
    }
}

/// Writes one line to standard output (the launched app's log, or nothing the harness reads).
func say(_ line: String) {
    try? FileDescriptor.standardOutput.writeAll(Array((line + "\n").utf8))
}

/// Memory the app maps and touches, and unmaps again: what reclamation weighs.
final class AppMemory: Sendable {
    private let chunks = Mutex<[(UnsafeMutableRawPointer, Int)]>([])
    let maximumBytes: Int
    let log: AllocationLog?

    init(maximumBytes: Int, log: AllocationLog?) {
        self.maximumBytes = maximumBytes
        self.log = log
        log?.record(0)
    }

    /// Maps and touches a random chunk if there is room, else frees one, at random.
    func change(_ random: inout SeededGenerator) {
        guard maximumBytes >= 1 << 20 else { return }
        chunks.withLock { chunks in
            let held = chunks.reduce(0) { $0 + $1.1 }
            let room = maximumBytes - held
            if room >= 1 << 20 && (chunks.isEmpty || random.chance(60)) {
                let size = Int.random(in: 1...(room >> 20), using: &random) << 20
                guard let pointer = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
                    pointer != MAP_FAILED
                else { return }
                // Logged before it is touched, marked: a reading from now on may see any part of it.
                log?.record(held + size, touching: true)
                for offset in stride(from: 0, to: size, by: 4096) {
                    pointer.storeBytes(of: 1, toByteOffset: offset, as: UInt8.self)
                }
                chunks.append((pointer, size))
                // Logged once touched: until now it held less, but never less than before.
                log?.record(held + size)
            } else if !chunks.isEmpty {
                let (pointer, size) = chunks.remove(at: Int.random(in: 0..<chunks.count, using: &random))
                // Logged before it is unmapped: from now on it holds at least this.
                log?.record(held - size)
                munmap(pointer, size)
            }
        }
    }
}

/// An app's log of the memory it maps (`--memory-log`): the file `APP.PID` in the directory, one line per change,
/// `CLOCK_MONOTONIC` in nanoseconds and the bytes held from then on, and `touching` when a chunk's pages are about
/// to be touched (the bytes it will hold once they are). The harness reads it after the run, so that
/// `heaviest-first` knows what an app weighed between its readings (`SoakEvidence.allocationChanges`).
final class AllocationLog: Sendable {
    private let file: FileDescriptor

    /// The log of this process of `app`; nil when it cannot be made (the run goes on without it).
    init?(directory: String, app: String) {
        guard
            let file = try? FileDescriptor.open(
                "\(directory)/\(app).\(getpid())", .writeOnly, options: [.create, .append, .truncate],
                permissions: 0o644)
        else { return nil }
        self.file = file
    }

    /// Logs that the process holds `bytes` from now on, or, `touching`, that it starts touching pages to hold them.
    func record(_ bytes: Int, touching: Bool = false) {
        try? file.writeAll(Array("\(MonotonicClock.now()) \(bytes)\(touching ? " touching" : "")\n".utf8))
    }
}

/// The app's scheduled work: a launch handler for each identifier the harness submits, doing what the app's seed
/// says with each task (complete it at once; work until told to stop, then complete it; never complete it, so the
/// daemon ends it; fail with retry; work a while and fail with retry if told to stop first), and recording in
/// `DIRECTORY/APP.PID`, one line each with the `CLOCK_MONOTONIC` moment in nanoseconds, every `run TASK
/// IDENTIFIER` it got, every `expiring TASK` and every `completing TASK success|failure|retry`, written before the
/// call. The harness reads it after the run (`ScheduledReceipt`).
final class ScheduledWork: Sendable {
    private let file: FileDescriptor?
    private let random: Mutex<SeededGenerator>

    /// What the app does with one task.
    private enum Plan: CaseIterable {
        case completeAtOnce, workUntilTold, neverComplete, failWithRetry, workThenComplete
    }

    init(directory: String, app: String, seed: UInt64) {
        file = try? FileDescriptor.open(
            "\(directory)/\(app).\(getpid())", .writeOnly, options: [.create, .append, .truncate], permissions: 0o644)
        random = Mutex(SeededGenerator(seed: seed))
    }

    /// Registers the launch handler of every identifier the soak uses.
    func register(on application: BackgroundApplication) {
        for (identifier, _) in SoakSchedule.scheduledIdentifiers {
            application.register(forTaskWithIdentifier: identifier) { [self] task in run(task) }
        }
    }

    private func record(_ line: String) {
        try? file?.writeAll(Array("\(MonotonicClock.now()) \(line)\n".utf8))
    }

    private func run(_ task: ScheduledTask) {
        record("run \(task.taskId) \(task.identifier)")
        let (plan, workMilliseconds) = random.withLock { random in
            (Plan.allCases.randomElement(using: &random)!, Int.random(in: 100...3_000, using: &random))
        }
        let isDone = Mutex(false)
        let complete: @Sendable (Bool, Bool) -> Void = { [self] success, retry in
            guard
                isDone.withLock({ done in
                    defer { done = true }; return !done
                })
            else { return }
            record("completing \(task.taskId) \(success ? "success" : retry ? "retry" : "failure")")
            task.setTaskCompleted(success: success, retry: retry)
        }
        task.expirationHandler = { [self] in
            record("expiring \(task.taskId)")
            switch plan {
            case .workUntilTold: complete(true, false)
            case .workThenComplete: complete(false, true)
            case .completeAtOnce, .neverComplete, .failWithRetry: break
            }
        }
        switch plan {
        case .completeAtOnce: complete(true, false)
        case .workUntilTold, .neverComplete: break
        case .failWithRetry:
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(workMilliseconds / 2)) {
                complete(false, true)
            }
        case .workThenComplete:
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(workMilliseconds)) {
                complete(true, false)
            }
        }
    }
}

/// The app's lifecycle callbacks, each following the app's behaviour.
final class SoakAppDelegate: ApplicationDelegate, Sendable {
    let options: SoakAppOptions
    private let random: Mutex<SeededGenerator>

    init(options: SoakAppOptions, seed: UInt64) {
        self.options = options
        random = Mutex(SeededGenerator(seed: seed))
    }

    func applicationDidEnterBackground(_ application: BackgroundApplication) {
        let budgetMilliseconds = Int(options.backgroundTime.components.seconds) * 1000
        switch options.behaviour {
        case .hangsInBackground:
            sleep(UInt32(options.backgroundTime.components.seconds) + 8)
            return
        case .holdsLock:
            let holdMilliseconds = random.withLock { Int.random(in: 200...4_000, using: &$0) }
            let path = options.lockDirectory + "/lock-\(getpid())"
            let descriptor = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0o600)
            if descriptor >= 0, flock(descriptor, LOCK_EX | LOCK_NB) == 0 {
                DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(holdMilliseconds)) {
                    flock(descriptor, LOCK_UN)
                    close(descriptor)
                    unlink(path)
                }
            } else if descriptor >= 0 {
                close(descriptor)
            }
        default: break
        }
        let ignores = options.behaviour == .ignoresExpiration
        let lengthMilliseconds = random.withLock {
            ignores ? budgetMilliseconds * 2 : Int.random(in: 100...(budgetMilliseconds * 13 / 10), using: &$0)
        }
        let task = Mutex(BackgroundTaskIdentifier.invalid)
        let identifier = application.beginBackgroundTask(withName: "work") {
            if !ignores { application.endBackgroundTask(task.withLock { $0 }) }
        }
        task.withLock { $0 = identifier }
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(lengthMilliseconds)) {
            application.endBackgroundTask(identifier)
        }
    }

    func applicationWillTerminate(_ application: BackgroundApplication) {
        exit(0)
    }
}
