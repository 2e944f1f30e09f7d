// The schedule's operations carried out: controller calls, and the faults with their evidence.

import BGTaskClient
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSoak
import Glibc

extension SoakRun {
    /// Carries out one operation; harness failures (a daemon that will not come back) throw.
    func perform(_ operation: SoakOperation) throws {
        switch operation {
        case .setState(let slot, let stateName):
            guard let state = AppState(rawValue: stateName) else { return }
            let name = schedule.slots[slot].name
            _ = controller.call(operation.kind) { client throws(ClientError) in try client.setState(name, to: state) }
        case .post(let slot, let behaviorName):
            let name = slot.map { schedule.slots[$0].name }
            let behavior = DeliveryBehavior(rawValue: behaviorName)
            _ = controller.call(operation.kind) { client throws(ClientError) in
                try client.post(name: "soak.controller", payload: ["seq": .number(1)], behavior: behavior, app: name)
            }
        case .terminate(let slot):
            let name = schedule.slots[slot].name
            _ = controller.call(operation.kind) { client throws(ClientError) in try client.terminate(name) }
        case .fault(let fault, let parameter):
            faultMarks.append(FaultMark(at: clock.now(), name: fault.rawValue, restartsDaemon: fault.restartsDaemon))
            try inject(fault, parameterMilliseconds: parameter)
            faultCounts[fault, default: 0] += 1
            controller.count(operation.kind)
        case .setPower(let isOnline):
            setPower(isOnline: isOnline)
            controller.count(operation.kind)
        case .submit(let slot, let identifier, let kind, let delay):
            submit(schedule.slots[slot].name, identifier: identifier, kind: kind, earliestBeginMilliseconds: delay)
        case .cancel(let slot, let identifier):
            cancel(schedule.slots[slot].name, identifier: identifier)
        }
    }

    /// Injects one fault and records what it did.
    private func inject(_ fault: SoakFault, parameterMilliseconds: Int) throws {
        guard let service else { return }
        switch fault {
        case .kill, .hang, .restart:
            // Stamped when asked: the list shows the daemon at some moment after that, so every entry that could
            // change it is received after the stamp.
            let asked = clock.now()
            let before =
                controller.listApps(within: .seconds(5)).map { AppSnapshot(takenAt: asked, apps: $0) }
                ?? lastApps ?? AppSnapshot(takenAt: asked, apps: [])
            let times: (stoppedAt: Int64, readyAt: Int64)
            let cause: RestartCause
            do {
                switch fault {
                case .kill:
                    times = try service.killAndRestart()
                    cause = .killed
                case .hang:
                    times = try service.hangUntilWatchdog()
                    cause = .watchdog
                default:
                    times = try service.restart()
                    cause = .serviceRestart
                }
            } catch {
                throw SoakError("the daemon did not come back after the \(fault.rawValue) fault: \(error)")
            }
            guard let after = controller.listApps(within: .seconds(20)) else {
                throw SoakError("the daemon did not answer ListApps within 20 s after the \(fault.rawValue) fault")
            }
            recordRestart(cause, hang: fault == .hang, before: before, times: times, after: after)
            log(
                "\(fault.rawValue): daemon back after \(Double(times.readyAt - times.stoppedAt) / 1e6) ms, "
                    + "\(after.count) apps listed")
        case .clientKill:
            // A client calling back to back, killed after a while in the middle of whatever call it is making.
            hammerCount += 1
            let name = "soak-hammer-\(hammerCount)"
            let arguments =
                [executable]
                + SoakAppOptions.arguments(
                    name: name, socketPath: socketPath, seed: UInt64(hammerCount), behaviour: .hammers,
                    lifetime: .seconds(60), allocationMaximumMiB: 0, peerCount: 0, backgroundTime: Self.backgroundTime,
                    lockDirectory: scratch + "/locks", parent: getpid())
            let process = try ProcessSpawner.spawn(arguments, options: SpawnOptions(standardOutput: .nullDevice))
            usleep(UInt32(parameterMilliseconds) * 1000)
            try? process.pidFD.sendSignal(.kill)
            _ = try? process.waitForExit()
            try? process.pidFD.close()
        case .hostile:
            var arguments = [
                executable, "hostile", "--socket", socketPath, "--seed", String(parameterMilliseconds), "--seconds",
                "4",
            ]
            if isRoot, let copy = hostileExecutable() {
                arguments =
                    ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", copy] + arguments.dropFirst()
            }
            let process = try ProcessSpawner.spawn(
                arguments, options: SpawnOptions(standardOutput: .nullDevice, standardError: .nullDevice))
            if (try? process.pidFD.waitForExit(timeout: .seconds(30))) != true { try? process.pidFD.sendSignal(.kill) }
            _ = try? process.waitForExit()
            try? process.pidFD.close()
        case .diskFull:
            guard let stateDisk else { return }
            let bytes = try stateDisk.fill()
            log("disk-full: \(bytes) bytes of filler; held \(parameterMilliseconds * 2) ms")
            // The apps keep churning while the state cannot be saved.
            let until = clock.now() + .milliseconds(parameterMilliseconds * 2)
            while clock.now() < until {
                usleep(200_000)
                sample()
            }
            stateDisk.free()
        }
    }

    /// A copy of this program another user can run (the build directory may not be theirs to read), made once.
    private func hostileExecutable() -> String? {
        let copy = scratch + "/bgtask-soak"
        if access(copy, X_OK) == 0 { return copy }
        guard let process = try? ProcessSpawner.spawn(["cp", executable, copy]),
            (try? process.waitForExit()) == .exited(0)
        else { return nil }
        try? process.pidFD.close()
        chmod(copy, 0o755)
        return copy
    }
}
