// What wakes the memory monitor between its samples: a usage threshold on the managed apps' memory
// cgroup at AppsMemoryMax, and PSI triggers where the host accepts them.

import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// The event sources that make the memory monitor sample at once rather than at its next tick: each reports
/// through `fired`, with the moment it fired, and says what it watches for `GetStatus` and the log.
final class MemoryTriggers {
    /// One armed trigger: the descriptor the kernel signals, the loop source watching it, and what it is.
    private struct Armed {
        var descriptor: FileDescriptor
        var source: IOSource
        var description: String
    }

    private let logger: Logger
    private let loop: EventLoop
    private let clock: ManagerClock
    private let fired: (MonotonicInstant, String) -> Void
    private var threshold: Armed?
    private var thresholdBytes: UInt64?
    private var pressure: Armed?
    private var pressureWatch: MemoryPressureWatch?

    /// The PSI trigger the daemon arms itself when the service manager names nothing: 100 ms of stall in 1 s on
    /// the whole system (widened to the 2 s window the kernel allows without CAP_SYS_RESOURCE).
    static let systemTrigger = MemoryPressureTrigger(kind: .some, stall: .milliseconds(100), window: .seconds(1))

    /// Triggers watched on `loop`, logging to `logger`, each firing `fired` with the time read from `clock`.
    init(logger: Logger, loop: EventLoop, clock: ManagerClock, fired: @escaping (MonotonicInstant, String) -> Void) {
        self.logger = logger
        self.loop = loop
        self.clock = clock
        self.fired = fired
    }

    /// The daemon's own `$MEMORY_PRESSURE_WATCH` and `$MEMORY_PRESSURE_WRITE`, as the service manager set them.
    static func serviceManagerEnvironment() -> [String: String] {
        var environment: [String: String] = [:]
        for key in [MemoryPressureWatch.watchVariable, MemoryPressureWatch.writeVariable] {
            if let value = ProcessInfoEnvironment.value(key) { environment[key] = value }
        }
        return environment
    }

    /// What wakes the monitor, for `GetStatus` (`memory.trigger`) and the startup log: each armed trigger, then
    /// the polling that is always there beside them.
    var description: String {
        ([threshold?.description, pressure?.description].compactMap { $0 } + ["polling"]).joined(separator: " + ")
    }

    /// Arms the pressure watch: what `$MEMORY_PRESSURE_WATCH` names when the service manager sets it (systemd's
    /// protocol; `/dev/null` turns it off), else a PSI trigger on `/proc/pressure/memory`, else on the managed
    /// apps' cgroup2 root's `memory.pressure` (`appsPressureFile`). Logged either way; polling goes on beside it.
    func armPressure(environment: [String: String], appsPressureFile: String?) {
        var watch: MemoryPressureWatch?
        do {
            switch try MemoryPressureWatch.fromEnvironment(environment) {
            case .off?:
                logger.info("memory pressure watching is turned off by the service manager")
                return
            case .watching(let fromManager)?:
                watch = fromManager
            case nil:
                break
            }
        } catch {
            logger.warning("cannot watch what the service manager names: \(error); arming a trigger of my own")
        }
        if watch == nil {
            var candidates = ["/proc/pressure/memory"]
            if let appsPressureFile { candidates.append(appsPressureFile) }
            var failures: [String] = []
            for path in candidates where watch == nil {
                do {
                    watch = try MemoryPressureWatch.armPSI(path: path, trigger: Self.systemTrigger)
                } catch {
                    failures.append("\(error)")
                }
            }
            if watch == nil {
                logger.info("no memory pressure trigger (\(failures.joined(separator: "; "))): polling alone")
                return
            }
        }
        guard let watch else { return }
        do {
            let source = try loop.addIO(fd: watch.fileDescriptor, events: watch.events, name: "memory-pressure") {
                [weak self] _, events in
                self?.pressureReported(events)
            }
            pressure = Armed(descriptor: watch.fileDescriptor, source: source, description: "\(watch)")
            pressureWatch = watch
        } catch {
            try? watch.close()
            logger.warning("cannot watch \(watch): \(error); polling alone")
        }
    }

    private func pressureReported(_ events: IOEvents) {
        guard let watch = pressureWatch else { return }
        switch (try? watch.acknowledge(events)) ?? .ended {
        case .pressure:
            fired(clock.freshNow, "memory pressure (\(watch))")
        case .nothing:
            break
        case .ended:
            logger.warning("\(watch) can no longer report pressure: polling alone")
            disarm(&pressure)
            pressureWatch = nil
        }
    }

    /// Arms (or moves, or removes) the usage threshold at `appsMemoryMax` on the managed apps' v1 memory cgroup
    /// (`appsMemoryRoot`): the kernel then reports the crossing itself, in the allocation that makes it, instead
    /// of the next sample.
    func update(appsMemoryMax: UInt64?, appsMemoryRoot: CgroupDirectory?) {
        guard appsMemoryMax != thresholdBytes || (appsMemoryMax != nil && threshold == nil) else { return }
        disarm(&threshold)
        thresholdBytes = appsMemoryMax
        guard let bytes = appsMemoryMax, let root = appsMemoryRoot else { return }
        do {
            let descriptor = try root.armUsageThreshold(bytes)
            let description = "usage-threshold(\(root.path)/memory.usage_in_bytes at \(bytes))"
            let source = try loop.addIO(fd: descriptor, events: .readable, name: "memory-threshold") {
                [weak self] _, _ in
                guard let self else { return }
                drain(descriptor)
                fired(clock.freshNow, "the managed apps' memory crossed AppsMemoryMax")
            }
            threshold = Armed(descriptor: descriptor, source: source, description: description)
        } catch {
            logger.warning(
                "cannot arm a usage threshold on \(root.path): \(error); AppsMemoryMax is watched by polling alone")
        }
    }

    /// Reads an eventfd's count, so the level-triggered source stops firing until the next crossing.
    private func drain(_ descriptor: FileDescriptor) {
        var count: UInt64 = 0
        _ = withUnsafeMutableBytes(of: &count) { Glibc.read(descriptor.rawValue, $0.baseAddress, 8) }
    }

    private func disarm(_ armed: inout Armed?) {
        guard let current = armed else { return }
        current.source.cancel()
        try? current.descriptor.close()
        armed = nil
    }
}
