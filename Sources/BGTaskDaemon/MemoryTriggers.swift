// What wakes the memory monitor between its samples (DESIGN §4): a usage threshold on the managed apps' memory
// cgroup at AppsMemoryMax, and PSI triggers where the host accepts them.

import BGTaskCore
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

    private unowned let manager: Manager
    private let fired: (MonotonicInstant, String) -> Void
    private var threshold: Armed?
    private var thresholdBytes: UInt64?

    init(manager: Manager, fired: @escaping (MonotonicInstant, String) -> Void) {
        self.manager = manager
        self.fired = fired
    }

    /// What wakes the monitor, for `GetStatus` (`memory.trigger`) and the startup log: each armed trigger, then
    /// the polling that is always there beside them.
    var description: String {
        ([threshold?.description].compactMap { $0 } + ["polling"]).joined(separator: " + ")
    }

    /// Arms (or moves, or removes) the usage threshold at `appsMemoryMax` on the managed apps' v1 memory cgroup:
    /// the kernel then reports the crossing itself, in the allocation that makes it, instead of the next sample.
    func update(appsMemoryMax: UInt64?) {
        guard appsMemoryMax != thresholdBytes || (appsMemoryMax != nil && threshold == nil) else { return }
        disarm(&threshold)
        thresholdBytes = appsMemoryMax
        guard let bytes = appsMemoryMax, let root = manager.launchRoots.memory else { return }
        do {
            let descriptor = try root.armUsageThreshold(bytes)
            let description = "usage-threshold(\(root.path)/memory.usage_in_bytes at \(bytes))"
            let source = try manager.loop.addIO(fd: descriptor, events: .readable, name: "memory-threshold") {
                [unowned self] _, _ in
                self.drain(descriptor)
                self.fired(self.manager.clock.freshNow, "the managed apps' memory crossed AppsMemoryMax")
            }
            threshold = Armed(descriptor: descriptor, source: source, description: description)
        } catch {
            manager.logger.warning(
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

    /// Removes every trigger (the daemon stops).
    func disarmAll() {
        disarm(&threshold)
    }
}
