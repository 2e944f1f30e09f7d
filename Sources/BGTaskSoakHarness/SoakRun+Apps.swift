// The apps of a soak run: started in their slots (launched, scoped or plain), reaped, and replaced when they end.

import BGTaskClient
import BGTaskPOSIX
import BGTaskProtocol
import Glibc

/// The app alive in a slot: its process as the harness holds it.
struct RunningApp {
    var name: String
    /// The harness's child (plain and scoped apps), reaped by the harness.
    var process: SpawnedProcess?
    /// A pidfd of a launched app (the daemon's child).
    var pidFD: PidFD?

    var pid: pid_t? { process?.pid ?? pidFD?.pid }

    /// Whether it has exited (reaping the harness's own child).
    mutating func hasEnded() -> Bool {
        if let process {
            guard (try? process.exitStatusIfExited()) == nil else {
                try? process.pidFD.close()
                self.process = nil
                return true
            }
            return false
        }
        if let pidFD { return (try? pidFD.hasExited) ?? true }
        return true
    }

    /// SIGKILL through its pidfd.
    func kill() {
        try? process?.pidFD.sendSignal(.kill)
        try? pidFD?.sendSignal(.kill)
    }
}

extension SoakRun {
    /// The `app` arguments of generation `generation` of `slot`.
    private func appArguments(_ slot: AppSlot, generation: Int, selfRegistered: Bool) -> [String] {
        SoakAppOptions.arguments(
            name: selfRegistered ? slot.name : nil, socketPath: selfRegistered ? socketPath : nil,
            seed: slot.seed &+ UInt64(generation) &* 0x9E37_79B9_7F4A_7C15, behaviour: slot.behaviour,
            lifetime: options.duration + .seconds(120), allocationMaximumMiB: slot.allocationMaximumMiB,
            peerCount: options.apps, backgroundTime: Self.backgroundTime, lockDirectory: scratch + "/locks",
            parent: selfRegistered ? getpid() : nil, memoryLogDirectory: scratch + "/memory",
            scheduledLogDirectory: scratch + "/scheduled")
    }

    /// Starts the app of `slot`; false when it could not be (the daemon refused the launch, or is down).
    @discardableResult
    func spawn(_ slot: AppSlot) -> Bool {
        let generation = generations[slot.index, default: 0]
        generations[slot.index] = generation + 1
        switch slot.origin {
        case .launched:
            let argv = [executable] + appArguments(slot, generation: generation, selfRegistered: false)
            guard
                let app = controller.call(
                    "Launch",
                    { client throws(ClientError) in
                        try client.launch(name: slot.name, argv: argv)
                    }), let pidFD = try? PidFD.open(pid: pid_t(app.pid))
            else { return false }
            running[slot.index] = RunningApp(name: slot.name, pidFD: pidFD)
        case .scoped, .plain:
            var arguments = [executable] + appArguments(slot, generation: generation, selfRegistered: true)
            if slot.origin == .scoped, let cgroups, let scope = try? cgroups.makeScope() {
                // The shell moves itself into the scope before it becomes the app: the app registers from there.
                arguments = ["sh", "-c", "echo $$ >'\(scope.path)/cgroup.procs' && exec \"$0\" \"$@\""] + arguments
            }
            let output: StandardStream = appsLog.map { .fileDescriptor($0) } ?? .nullDevice
            guard
                let process = try? ProcessSpawner.spawn(
                    arguments, options: SpawnOptions(standardOutput: output, standardError: output))
            else { return false }
            running[slot.index] = RunningApp(name: slot.name, process: process)
        }
        controller.count("start \(slot.origin.rawValue) app")
        return true
    }

    /// Reaps ended apps; when `allowingNew`, starts their slots again (an app whose name the daemon still holds is
    /// refused, and tried again a second later).
    func respawnEnded(allowingNew: Bool) {
        reapAll()
        guard allowingNew else { return }
        for slot in schedule.slots where running[slot.index] == nil {
            if lastApps?.apps.contains(where: { $0.name == slot.name && ($0.state.isRunning || $0.state == .suspended) }
            )
                == true
            {
                continue
            }
            spawn(slot)
        }
    }

    /// Drops every slot whose app has ended.
    func reapAll() {
        for slot in running.keys.sorted() {
            if running[slot]?.hasEnded() == true {
                try? running[slot]?.pidFD?.close()
                running[slot] = nil
            }
        }
    }
}
