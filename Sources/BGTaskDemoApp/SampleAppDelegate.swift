// The sample app's lifecycle callbacks: background work under a task, its expiration handler, memory, termination.
import BGTaskClient
import Dispatch
import Foundation
import Synchronization

/// The sample app's `ApplicationDelegate`, as an iOS developer writes one: on entering the background it begins a
/// background task for its work (an upload, a render), ends the task when the work is done, and ends it early when
/// the expiration handler runs — unless it was told to misbehave (`--work-forever`), in which case it ignores the
/// handler and keeps working until the daemon terminates it.
final class SampleAppDelegate: ApplicationDelegate {
    let options: SampleAppOptions
    private let work = Mutex(Work())

    /// The background work in progress.
    private struct Work {
        /// The task covering the work; `.invalid` when none is open.
        var task = BackgroundTaskIdentifier.invalid
        /// Set by the expiration handler of a well-behaved app: the work loop stops at its next step.
        var isCancelled = false
        /// Memory held for the app's lifetime (`--allocate`): every byte written, so every page is resident.
        var buffer: [UInt8] = []
        /// Set on willTerminate: the daemon no longer counts the app's background time.
        var isTerminating = false
    }

    init(options: SampleAppOptions) {
        self.options = options
    }

    func applicationDidEnterBackground(_ application: BackgroundApplication) {
        if case .nothing = options.work {
            AppOutput.line("nothing to finish in background: the daemon may suspend it")
            return
        }
        guard work.withLock({ $0.task == .invalid }) else { return }
        // Begun before this callback returns, so the lease is held when didEnterBackground is acknowledged.
        let task = application.beginBackgroundTask(withName: options.taskName) { [self] in
            expirationHandlerRan(in: application)
        }
        guard task != .invalid else {
            AppOutput.line(
                "beginBackgroundTask(withName: \"\(options.taskName)\") was refused: no background time left")
            return
        }
        work.withLock {
            $0.task = task
            $0.isCancelled = false
        }
        AppOutput.line(
            "began background task \(task) \"\(options.taskName)\" with backgroundTimeRemaining "
                + AppOutput.seconds(application.backgroundTimeRemaining))
        DispatchQueue.global().async { [self] in
            perform(task, in: application)
        }
    }

    func applicationDidReceiveMemoryWarning(_ application: BackgroundApplication, warning: MemoryWarning) {
        // The buffer is the work's: held from the moment the work starts (it may be still filling) to the end.
        let holdsBuffer = options.allocationMebibytes > 0 && work.withLock { $0.task != .invalid || !$0.buffer.isEmpty }
        let standing =
            warning.isLikelyVictim
            ? "likely victim, rank \(warning.rank.map(String.init) ?? "?")" : "not a likely victim"
        if holdsBuffer {
            AppOutput.line(
                "memory warning (\(standing)): the \(options.allocationMebibytes) MiB \"\(options.taskName)\" buffer "
                    + "is in use: keeping it")
        } else {
            AppOutput.line("memory warning (\(standing)): nothing cached to free")
        }
    }

    func applicationWillTerminate(_ application: BackgroundApplication) {
        if case .forever = options.work {
            work.withLock { $0.isTerminating = true }
            AppOutput.line("willTerminate: still working; the daemon will kill it when its grace ends")
            return
        }
        AppOutput.line("willTerminate: state saved, exiting")
        exit(0)
    }

    /// The expiration handler of the app's background task.
    private func expirationHandlerRan(in application: BackgroundApplication) {
        let task = work.withLock { $0.task }
        if case .forever = options.work {
            AppOutput.line(
                "expiration handler ran for task \(task): ignoring it and working on (misbehaving on purpose)")
            return
        }
        work.withLock { $0.isCancelled = true }
        endTask(in: application, saying: "expiration handler ran for task \(task): stopped the work and")
    }

    /// The work itself, on a background queue: allocates what it was asked to, then reports the remaining
    /// background time every `reportInterval` until the work is done (or forever).
    private func perform(_ task: BackgroundTaskIdentifier, in application: BackgroundApplication) {
        if options.allocationMebibytes > 0 {
            // `repeating:` writes every byte, so the pages are resident and count in the app's PSS.
            let buffer = [UInt8](repeating: 0xA5, count: options.allocationMebibytes << 20)
            work.withLock { $0.buffer = buffer }
            AppOutput.line("allocated and filled \(options.allocationMebibytes) MiB for \"\(options.taskName)\"")
        }
        let started = ContinuousClock.now
        while true {
            var step = options.reportInterval
            if case .finite(let length) = options.work {
                let left = length - (ContinuousClock.now - started)
                guard left > .zero else { break }
                step = min(step, left)
            }
            // Stands in for a slice of real work (a chunk uploaded, a frame rendered).
            Thread.sleep(forTimeInterval: step.timeInterval)
            if work.withLock({ $0.isCancelled }) { return }
            if case .finite(let length) = options.work, ContinuousClock.now - started >= length { break }
            if work.withLock({ $0.isTerminating }) {
                AppOutput.line(
                    "working on \"\(options.taskName)\" after willTerminate: no background time counts any more")
                continue
            }
            AppOutput.line(
                "working on \"\(options.taskName)\": backgroundTimeRemaining "
                    + AppOutput.seconds(application.backgroundTimeRemaining))
        }
        endTask(in: application, saying: "\"\(options.taskName)\" is done:")
    }

    /// Ends the open task once, whichever of completion and expiry comes first.
    private func endTask(in application: BackgroundApplication, saying prefix: String) {
        let task = work.withLock { (work: inout Work) -> BackgroundTaskIdentifier in
            defer { work.task = .invalid }
            return work.task
        }
        guard task != .invalid else { return }
        application.endBackgroundTask(task)
        AppOutput.line("\(prefix) ended background task \(task)")
    }
}
