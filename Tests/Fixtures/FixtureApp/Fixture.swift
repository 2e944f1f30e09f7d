// The fixture app's state and commands: one stdin line in, one or more stdout lines out.
import BGTaskClient
import BGTaskJSON
import BGTaskPOSIX
import Foundation
import Glibc
import Synchronization

/// Writes whole lines to stdout, one at a time from any thread, unbuffered so a test reading the pipe sees each
/// line as soon as it is printed.
enum Output {
    private static let lock = Mutex(())

    static func line(_ text: String) {
        lock.withLock { _ in
            do {
                try FileDescriptor.standardOutput.writeAll(Array((text + "\n").utf8))
            } catch {
                // The test stopped reading: nobody is left to tell, and the lifetime bound ends the process.
            }
        }
    }
}

/// How events are acknowledged.
enum AcknowledgementMode: String {
    /// When the handlers return (the library's default).
    case auto
    /// Only with `ack EVENTID`.
    case manual
    /// Never: `ack EVENTID` is refused too, so a test can watch `enter-background-timeout`.
    case never
}

/// The fixture's state, shared by the stdin loop and the callback queue.
final class Fixture: Sendable {
    let socketPath: String?

    private struct State {
        var app: BackgroundApplication?
        var mode = AcknowledgementMode.auto
        /// End a task from its expiration handler (a well-behaved app), or keep it open (to see `task-expired`).
        var endsExpiredTasks = true
        /// Exit when `willTerminate` arrives (as apps do), or stay until the daemon's SIGKILL.
        var exitsOnWillTerminate = true
        var lock: FileDescriptor?
        /// Free every allocation when `memoryWarning` arrives (`on-warning free`), or keep them.
        var freesOnMemoryWarning = false
        /// Mappings made by `alloc`, each its own so that unmapping it hands its pages back to the kernel.
        var allocations: [UnsafeMutableRawBufferPointer] = []
    }

    // The allocations are only touched under the lock: they exist to be charged to the process until freed.
    private let state = Mutex(UncheckedState(State()))

    /// `State` holds raw buffers, which are not `Sendable`; every access goes through the `Mutex`, so they are
    /// never shared between threads unsynchronised.
    private struct UncheckedState: @unchecked Sendable {
        var value: State
        init(_ value: State) { self.value = value }
    }

    init(socketPath: String?) {
        self.socketPath = socketPath
    }

    private func withState<Result>(_ body: (inout State) -> Result) -> Result {
        state.withLock { body(&$0.value) }
    }

    /// Runs one command line.
    func run(_ line: String) {
        let words = line.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        guard let command = words.first else { return }
        let arguments = Array(words.dropFirst())
        switch command {
        case "register": register(arguments)
        case "unregister": unregister()
        case "begin": begin(arguments)
        case "end": end(arguments)
        case "remaining": remaining()
        case "handle": handle(arguments)
        case "ack": acknowledge(arguments)
        case "on-expire": onExpire(arguments)
        case "on-terminate": onTerminate(arguments)
        case "on-warning": onWarning(arguments)
        case "lock": lock(arguments)
        case "unlock": unlock()
        case "alloc": allocate(arguments)
        case "state": reportState()
        case "ping": Output.line("pong")
        case "exit": exit(arguments)
        default: Output.line("error unknown command \(command)")
        }
    }

    // MARK: Registration

    private func register(_ arguments: [String]) {
        guard let name = arguments.first else {
            return Output.line("error usage: register NAME [background] [exits-on-suspend]")
        }
        let flags = Set(arguments.dropFirst())
        guard flags.isSubset(of: ["background", "exits-on-suspend"]) else {
            return Output.line("error register: unknown flag in \(flags.sorted())")
        }
        guard withState({ $0.app == nil }) else { return Output.line("error register: already registered") }
        let mode = withState { $0.mode }
        var options = BackgroundApplication.Options(acknowledgesEventsAutomatically: mode == .auto)
        options.eventObserver = { [self] event in handle(event) }
        options.connectionObserver = { change in Output.line("connection \(Fixture.describe(change))") }
        do throws(ClientError) {
            let app = try BackgroundApplication(
                name: name, socketPath: socketPath, exitsOnSuspend: flags.contains("exits-on-suspend") ? true : nil,
                launchedInBackground: flags.contains("background"), options: options)
            withState { $0.app = app }
            Output.line("registered \(name) state=\(app.registeredApp.state.rawValue) pid=\(getpid())")
        } catch {
            Output.line("error register: \(error)")
        }
    }

    private func unregister() {
        guard
            let app = withState({ state in
                defer { state.app = nil }; return state.app
            })
        else {
            return Output.line("error unregister: not registered")
        }
        app.close()
        Output.line("unregistered")
    }

    private func handle(_ event: EventInfo) {
        var words = ["event", event.kind.rawValue, "id=\(event.id)"]
        if let taskIds = event.taskIds { words.append("tasks=" + taskIds.map(String.init).joined(separator: ",")) }
        if event.kind == .notification {
            words.append("name=\(event.name ?? "")")
            words.append("payload=\(Fixture.json(event.payload.map(JSONValue.object) ?? .null))")
            words.append("count=\(event.count ?? 1)")
        }
        if event.kind == .memoryWarning {
            words.append(event.likelyVictim == true ? "victim=\(event.rank ?? 0)" : "victim=safe")
        }
        Output.line(words.joined(separator: " "))
        if event.kind == .memoryWarning && withState({ $0.freesOnMemoryWarning }) { freeAllocations() }
        if event.kind == .willTerminate && withState({ $0.exitsOnWillTerminate }) {
            Output.line("exiting")
            Glibc.exit(0)
        }
    }

    // MARK: Tasks

    private func begin(_ arguments: [String]) {
        guard let app = registeredApp(for: "begin") else { return }
        let name = arguments.first
        // The identifier is known only once begin returns; the handler reads it from this box.
        let box = Mutex(BackgroundTaskIdentifier.invalid)
        let identifier = app.beginBackgroundTask(withName: name) { [self] in
            let identifier = box.withLock { $0 }
            Output.line("expired \(identifier)")
            if withState({ $0.endsExpiredTasks }) {
                app.endBackgroundTask(identifier)
                Output.line("ended \(identifier)")
            }
        }
        box.withLock { $0 = identifier }
        Output.line("began \(identifier)")
    }

    private func end(_ arguments: [String]) {
        guard let app = registeredApp(for: "end") else { return }
        guard let number = arguments.first.flatMap(Int.init) else { return Output.line("error usage: end ID") }
        let identifier = BackgroundTaskIdentifier(rawValue: number)
        guard app.openBackgroundTasks.contains(identifier) else {
            return Output.line("error end: no open task \(number)")
        }
        app.endBackgroundTask(identifier)
        Output.line("ended \(number)")
    }

    /// A launch handler for a scheduled request identifier: it prints `launched IDENTIFIER task=ID` and leaves the
    /// task running; its expiration handler prints `scheduled-expired ID`.
    private func handle(_ arguments: [String]) {
        guard let app = registeredApp(for: "handle") else { return }
        guard let identifier = arguments.first else { return Output.line("error usage: handle IDENTIFIER") }
        let isNew = app.register(forTaskWithIdentifier: identifier) { task in
            Output.line("launched \(task.identifier) task=\(task.taskId)")
            task.expirationHandler = { Output.line("scheduled-expired \(task.taskId)") }
        }
        Output.line(isNew ? "handling \(identifier)" : "error handle: \(identifier) has a handler already")
    }

    private func remaining() {
        guard let app = registeredApp(for: "remaining") else { return }
        let seconds = app.backgroundTimeRemaining
        Output.line(seconds == .greatestFiniteMagnitude ? "remaining unlimited" : "remaining \(seconds)")
    }

    private func onExpire(_ arguments: [String]) {
        switch arguments.first {
        case "end": withState { $0.endsExpiredTasks = true }
        case "keep": withState { $0.endsExpiredTasks = false }
        default: return Output.line("error usage: on-expire end|keep")
        }
        Output.line("on-expire \(arguments[0])")
    }

    private func onTerminate(_ arguments: [String]) {
        switch arguments.first {
        case "exit": withState { $0.exitsOnWillTerminate = true }
        case "stay": withState { $0.exitsOnWillTerminate = false }
        default: return Output.line("error usage: on-terminate exit|stay")
        }
        Output.line("on-terminate \(arguments[0])")
    }

    private func onWarning(_ arguments: [String]) {
        switch arguments.first {
        case "free": withState { $0.freesOnMemoryWarning = true }
        case "keep": withState { $0.freesOnMemoryWarning = false }
        default: return Output.line("error usage: on-warning free|keep")
        }
        Output.line("on-warning \(arguments[0])")
    }

    // MARK: Acknowledgements

    private func acknowledge(_ arguments: [String]) {
        guard let argument = arguments.first else { return Output.line("error usage: ack auto|manual|never|EVENTID") }
        if let mode = AcknowledgementMode(rawValue: argument) {
            let app = withState { state in
                state.mode = mode
                return state.app
            }
            app?.acknowledgesEventsAutomatically = mode == .auto
            return Output.line("ack \(mode.rawValue)")
        }
        guard let eventId = Int(argument) else { return Output.line("error usage: ack auto|manual|never|EVENTID") }
        guard withState({ $0.mode }) != .never else {
            return Output.line("error ack: acknowledgements are withheld (ack never)")
        }
        guard let app = registeredApp(for: "ack") else { return }
        do throws(ClientError) {
            try app.acknowledge(eventId: eventId)
            Output.line("acked \(eventId)")
        } catch {
            Output.line("error ack: \(error)")
        }
    }

    // MARK: Resources

    private func lock(_ arguments: [String]) {
        guard let path = arguments.first else { return Output.line("error usage: lock PATH") }
        guard withState({ $0.lock == nil }) else { return Output.line("error lock: already holding a lock") }
        do throws(Errno) {
            let fd = try FileDescriptor.open(path, .readWrite, options: [.create])
            // flock is not wrapped by BGTaskSystem (the daemon only reads /proc/locks), so the fixture calls libc
            // itself, as it does for the mappings of `alloc`.
            while flock(fd.rawValue, LOCK_EX) == -1 {
                guard errno == EINTR else {
                    let failure = Errno(rawValue: errno, operation: "flock(\(path))")
                    try? fd.close()  // The flock failure is the one to report.
                    throw failure
                }
            }
            withState { $0.lock = fd }
            Output.line("locked \(path)")
        } catch {
            Output.line("error lock: \(error)")
        }
    }

    private func unlock() {
        guard
            let fd = withState({ state in
                defer { state.lock = nil }; return state.lock
            })
        else {
            return Output.line("error unlock: no lock held")
        }
        do throws(Errno) {
            // Closing the only descriptor of the open file description releases the flock.
            try fd.close()
            Output.line("unlocked")
        } catch {
            Output.line("error unlock: \(error)")
        }
    }

    private func allocate(_ arguments: [String]) {
        guard let mebibytes = arguments.first.flatMap(Int.init), mebibytes > 0, mebibytes <= 4096 else {
            return Output.line("error usage: alloc MIB (1-4096)")
        }
        let byteCount = mebibytes << 20
        // An anonymous mapping of its own rather than malloc: glibc may keep a freed block in its heap instead of
        // returning it, and `on-warning free` must give the memory back to the kernel. mmap is not wrapped by
        // BGTaskSystem (the daemon maps nothing), so the fixture calls libc itself.
        let address = mmap(nil, byteCount, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        guard let address, Int(bitPattern: address) != -1 else {  // MAP_FAILED is (void *)-1.
            return Output.line("error alloc: \(Errno(rawValue: errno, operation: "mmap(\(mebibytes) MiB)"))")
        }
        let buffer = UnsafeMutableRawBufferPointer(start: address, count: byteCount)
        // Writing every byte makes the pages resident, so the memory shows in RSS, PSS and cgroup usage.
        buffer.initializeMemory(as: UInt8.self, repeating: 0xA5)
        let total = withState { state in
            state.allocations.append(buffer)
            return state.allocations.reduce(0) { $0 + $1.count } >> 20
        }
        Output.line("allocated \(mebibytes) total=\(total)")
    }

    /// Unmaps every allocation, handing its pages back to the kernel, and prints `freed MIB`.
    private func freeAllocations() {
        let allocations = withState { state in
            defer { state.allocations = [] }
            return state.allocations
        }
        var freedBytes = 0
        for buffer in allocations {
            // The buffers are mappings `alloc` made, each unmapped once: it was taken out of the state above.
            guard munmap(buffer.baseAddress, buffer.count) == 0 else {
                Output.line("error free: \(Errno(rawValue: errno, operation: "munmap(\(buffer.count >> 20) MiB)"))")
                continue
            }
            freedBytes += buffer.count
        }
        Output.line("freed \(freedBytes >> 20)")
    }

    // MARK: Misc

    private func reportState() {
        guard let app = withState({ $0.app }) else { return Output.line("state unregistered") }
        Output.line("state \(app.applicationState.rawValue)")
    }

    private func exit(_ arguments: [String]) {
        guard let code = arguments.first.flatMap(Int32.init) else { return Output.line("error usage: exit CODE") }
        Output.line("exiting \(code)")
        Glibc.exit(code)
    }

    private func registeredApp(for command: String) -> BackgroundApplication? {
        guard let app = withState({ $0.app }) else {
            Output.line("error \(command): not registered")
            return nil
        }
        return app
    }

    static func describe(_ change: ConnectionEvent) -> String {
        switch change {
        case .lost(let error): "lost \(error)"
        case .reconnectFailed(let error, let attempt): "failed attempt=\(attempt) \(error)"
        case .reconnected(let app, let attempt): "reconnected attempt=\(attempt) state=\(app.state.rawValue)"
        case .gaveUp(let error): "gave-up \(error)"
        case .requestFailed(let method, let error): "request-failed \(method) \(error)"
        case .noLaunchHandler(let identifier): "no-launch-handler \(identifier)"
        }
    }

    /// Compact JSON with sorted keys, so a test can compare payloads as text.
    static func json(_ value: JSONValue) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(value) else { return "null" }  // Decoded payloads always encode.
        return String(decoding: data, as: UTF8.self)
    }
}
