// Scheduled work in a soak run: the fake power adapter the daemon watches, the requests submitted and cancelled with
// their answers, and what the apps recorded of their scheduled tasks.

import BGTaskClient
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSoak
import BGTaskSystem
import Glibc

extension SoakRun {
    /// The fake power_supply class directory the daemon reads (`PowerSupplyPath=`).
    var powerSupplyPath: String { scratch + "/power" }

    /// Makes the power_supply tree with one adapter, online, and the directory the apps record their scheduled
    /// tasks in; the first power change is the state the daemon starts with.
    func preparePowerSupply() throws {
        mkdir(powerSupplyPath, 0o755)
        mkdir(powerSupplyPath + "/AC", 0o755)
        try writeFile(powerSupplyPath + "/AC/type", "Mains\n")
        try writeFile(powerSupplyPath + "/AC/online", "1\n")
        powerChanges = [PowerChange(at: clock.now(), isOnline: true)]
        // Launched apps may run as another user.
        mkdir(scratch + "/scheduled", 0o777)
        chmod(scratch + "/scheduled", 0o1777)
    }

    /// Plugs the adapter in or pulls it: `online` rewritten in place (the daemon's inotify watch sees the write).
    /// The daemon may see the new value from the moment the write starts; the harness reads its clock again only
    /// once its thread runs after the write, which on a busy machine can be after the daemon began tasks and the
    /// Watch stream stamped them. So a plug is recorded at the start of its write and a pull at its end: between the
    /// two records power is on for every moment the daemon could have seen it on.
    func setPower(isOnline: Bool) {
        let started = clock.now()
        do {
            try writeFile(powerSupplyPath + "/AC/online", isOnline ? "1\n" : "0\n")
        } catch {
            log("cannot write \(powerSupplyPath)/AC/online: \(error)")
            return
        }
        powerChanges.append(PowerChange(at: isOnline ? started : clock.now(), isOnline: isOnline))
    }

    /// `SubmitRequest` for `app`, recorded with its answer.
    func submit(_ app: String, identifier: String, kind: String, earliestBeginMilliseconds: Int?) {
        let requires = SoakSchedule.scheduledIdentifiers.first { $0.identifier == identifier }?.requires ?? []
        let earliestBegin = earliestBeginMilliseconds.map { WallClock.secondsSince1970() + Double($0) / 1000 }
        let asked = clock.now()
        let answer = controller.call("SubmitRequest") { client throws(ClientError) in
            try client.submitRequest(
                app: app, identifier: identifier, kind: ScheduledTaskKind(rawValue: kind), earliestBegin: earliestBegin,
                requires: requires.compactMap(Constraint.init(rawValue:)))
        }
        requestOperations.append(
            RequestOperation(
                at: asked, key: RequestKey(app: app, identifier: identifier), kind: .submit, requires: requires,
                taskKind: kind, outcome: answer != nil ? .accepted : outcome(of: controller.lastError),
                answeredAt: clock.now()))
    }

    /// `CancelRequest` of `app`'s request `identifier`, recorded with its answer.
    func cancel(_ app: String, identifier: String) {
        let asked = clock.now()
        let answer = controller.call("CancelRequest") { client throws(ClientError) in
            try client.cancelRequest(app: app, identifier: identifier)
        }
        requestOperations.append(
            RequestOperation(
                at: asked, key: RequestKey(app: app, identifier: identifier), kind: .cancel,
                outcome: answer != nil ? .accepted : outcome(of: controller.lastError), answeredAt: clock.now()))
    }

    /// A failed call's outcome: an error reply is a refusal (the daemon did nothing); anything else (no connection,
    /// a timeout, a broken reply) leaves it unknown whether the daemon did it.
    private func outcome(of error: ClientError?) -> RequestOperation.Outcome {
        switch error {
        case .lifecycle(let error): .refused(error.errorName.rawValue)
        case .service(let error): .refused(error.errorName.rawValue)
        case .remote(let error): .refused(error.name)
        case .permissionDenied: .refused("PermissionDenied")
        default: .unanswered
        }
    }

    /// The requests the daemon holds now, by key; nil when it did not answer.
    func heldRequests() -> Set<RequestKey>? {
        controller.call("ListRequests") { client throws(ClientError) in try client.listRequests() }
            .map { Set($0.map { RequestKey(app: $0.app, identifier: $0.identifier) }) }
    }

    /// What the apps recorded of their scheduled tasks (`ScheduledWork`), on the run's clock. A line cut short by a
    /// kill mid-write is left out.
    func scheduledReceipts() -> [ScheduledReceipt] {
        let directory = ProcFS(root: scratch + "/scheduled", fileSizeLimit: 4 << 20)
        var receipts: [ScheduledReceipt] = []
        for file in (try? directory.listDirectory("")) ?? [] {
            guard let dot = file.lastIndex(of: "."), let text = try? directory.read(file) else { continue }
            let app = String(file[..<dot])
            for line in text.split(separator: "\n") {
                let fields = line.split(separator: " ").map(String.init)
                guard fields.count >= 3, let nanoseconds = Int64(fields[0]), let task = Int(fields[2]) else { continue }
                let kind: ScheduledReceipt.Kind
                switch (fields[1], fields.count) {
                case ("run", 4): kind = .run(identifier: fields[3])
                case ("expiring", 3): kind = .expiring
                case ("completing", 4) where ["success", "failure", "retry"].contains(fields[3]):
                    kind = .completing(success: fields[3] == "success", retry: fields[3] == "retry")
                default: continue
                }
                receipts.append(ScheduledReceipt(at: clock.since(nanoseconds), app: app, taskId: task, kind: kind))
            }
        }
        return receipts
    }
}
