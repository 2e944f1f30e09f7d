// The run's schedule, drawn whole from the seed before the run starts: the same seed, apps, duration and faults
// give the same schedule.
import BGTaskSeededRandom

/// How a slot's app reaches the daemon.
enum AppOrigin: String, Sendable {
    /// Started by the daemon (`Launch`), in a cgroup the daemon makes under the harness's `CgroupRoot=`.
    case launched
    /// Started by the harness in a cgroup of its own, then registered itself (a desktop scope).
    case scoped
    /// Started by the harness and registered itself, in the harness's cgroup.
    case plain
}

/// One app slot: the app alive in it is replaced when it ends, with the same name and choices.
struct AppSlot: Sendable {
    var index: Int
    var name: String { "soak-\(index)" }
    var behaviour: SoakBehaviour
    var origin: AppOrigin
    var seed: UInt64
    /// The most it maps at once, in MiB.
    var allocationMaximumMiB: Int
}

/// One operation of the schedule.
enum SoakOperation: Hashable, Sendable {
    /// `SetState` of the slot's app.
    case setState(slot: Int, state: String)
    /// `Post` from the controller to the slot's app, or to every app.
    case post(slot: Int?, behavior: String)
    /// `Terminate` of the slot's app.
    case terminate(slot: Int)
    /// A fault, with a seeded parameter (how long a full disk or a killed client's calls last, in ms).
    case fault(SoakFault, parameterMilliseconds: Int)
    /// The fake power adapter's `online` written: external power plugged in or pulled.
    case setPower(isOnline: Bool)
    /// `SubmitRequest` for the slot's app: `identifier` (one of `SoakSchedule.scheduledIdentifiers`), `refresh` or
    /// `processing`, due `earliestBeginMilliseconds` after the call (nil: now).
    case submit(slot: Int, identifier: String, kind: String, earliestBeginMilliseconds: Int?)
    /// `CancelRequest` of the slot's app's request `identifier`.
    case cancel(slot: Int, identifier: String)

    /// The kind, for the per-kind counts.
    var kind: String {
        switch self {
        case .setState(_, let state): "SetState \(state)"
        case .post(let slot, _): slot == nil ? "Post to every app" : "Post"
        case .terminate: "Terminate"
        case .fault(let fault, _): "fault \(fault.rawValue)"
        case .setPower(let isOnline): isOnline ? "power on" : "power off"
        case .submit: "SubmitRequest"
        case .cancel: "CancelRequest"
        }
    }
}

/// The whole schedule.
struct SoakSchedule: Sendable {
    var slots: [AppSlot]
    /// Operations by time since the start, in order.
    var operations: [(at: Duration, operation: SoakOperation)]

    /// How often each fault is injected: one per 90 s of run, at least one (three for the restarting faults under
    /// systemd).
    static func count(of fault: SoakFault, duration: Duration, usesSystemd: Bool) -> Int {
        let perDuration = Int(duration.components.seconds / 90)
        return max(usesSystemd && fault.restartsDaemon ? 3 : 1, perDuration)
    }

    /// The identifiers the soak's requests use, each with the conditions every submit of it requires: one set per
    /// identifier, so the checker knows what a task of it asked for from its name alone. Requests needing `ac` are
    /// the ones the power flips start and stop; the other runs whenever it is due.
    static let scheduledIdentifiers: [(identifier: String, requires: [String])] = [
        ("scheduled-ac-0", ["ac"]), ("scheduled-ac-1", ["ac"]), ("scheduled-any", []),
    ]

    /// Draws the schedule. `canLaunch` and `canScope` say whether the host gives the harness cgroups (root).
    init(
        seed: UInt64, apps: Int, duration: Duration, faults: [SoakFault], usesSystemd: Bool, canLaunch: Bool,
        canScope: Bool, allocationTotalMiB: Int
    ) {
        var random = SeededGenerator(seed: seed)
        let perApp = max(1, min(64, allocationTotalMiB / max(1, apps)))
        slots = (0..<apps).map { index in
            var roll = Int.random(in: 0..<100, using: &random)
            var behaviour = SoakBehaviour.wellBehaved
            for (candidate, weight) in SoakBehaviour.weighted {
                if roll < weight {
                    behaviour = candidate
                    break
                }
                roll -= weight
            }
            let origin: AppOrigin =
                switch index % 5 {
                case 0 where canLaunch: .launched
                case 1 where canScope: .scoped
                default: .plain
                }
            return AppSlot(
                index: index, behaviour: behaviour, origin: origin, seed: random.childSeed(),
                allocationMaximumMiB: Int.random(in: 1...perApp, using: &random))
        }
        let milliseconds = Int(duration.components.seconds * 1000)
        var operations: [(at: Duration, operation: SoakOperation)] = []
        // The churn: on average one operation per 6 s per app, until 8 s before the end.
        var time = 1_000
        let meanGap = max(5, 6_000 / apps)
        while time < milliseconds - 8_000 {
            let slot = Int.random(in: 0..<apps, using: &random)
            let roll = Int.random(in: 0..<100, using: &random)
            let behaviors = ["drop", "coalesce", "hold", "wake"]
            let operation: SoakOperation =
                switch roll {
                case 0..<40: .setState(slot: slot, state: "background")
                case 40..<75: .setState(slot: slot, state: "active")
                case 75..<80: .setState(slot: slot, state: "inactive")
                case 80..<92: .post(slot: slot, behavior: behaviors.randomElement(using: &random)!)
                case 92..<95: .post(slot: nil, behavior: behaviors.randomElement(using: &random)!)
                default: .terminate(slot: slot)
                }
            operations.append((.milliseconds(time), operation))
            time += Int.random(in: 1...(2 * meanGap), using: &random)
        }
        // The faults, shuffled and spread over 10%..85% of the run with jitter.
        var faultList: [SoakFault] = []
        for fault in faults {
            faultList += Array(
                repeating: fault, count: Self.count(of: fault, duration: duration, usesSystemd: usesSystemd))
        }
        faultList.shuffle(using: &random)
        if !faultList.isEmpty {
            let first = milliseconds / 10
            let spacing = (milliseconds * 85 / 100 - first) / faultList.count
            for (position, fault) in faultList.enumerated() {
                let jitter = Int.random(in: 0...max(0, spacing / 4), using: &random)
                let parameter = Int.random(in: 1_000...4_000, using: &random)
                operations.append(
                    (
                        .milliseconds(first + position * spacing + jitter),
                        .fault(fault, parameterMilliseconds: parameter)
                    ))
            }
        }
        operations += Self.scheduledWork(slots: slots, milliseconds: milliseconds, random: &random)
        operations.sort { $0.at < $1.at }
        self.operations = operations
    }

    /// Scheduled work, drawn after everything else (so the rest of a seed's schedule is what it was without it):
    /// the power pulled and plugged in every 2 to 6 s, and about one submit or cancel per 0.9 s, until 10 s before
    /// the end, for the apps that read their events without blocking them (a request of an app that never reads, or
    /// hangs in its callbacks, can only expire; the checker needs the app's own word on its tasks).
    private static func scheduledWork(
        slots: [AppSlot], milliseconds: Int, random: inout SeededGenerator
    ) -> [(at: Duration, operation: SoakOperation)] {
        var operations: [(at: Duration, operation: SoakOperation)] = []
        var isOnline = true
        var time = 2_000
        while time < milliseconds - 6_000 {
            time += Int.random(in: 2_000...6_000, using: &random)
            isOnline.toggle()
            operations.append((.milliseconds(time), .setPower(isOnline: isOnline)))
        }
        let eligible = slots.filter(\.behaviour.takesScheduledWork).map(\.index)
        guard !eligible.isEmpty else { return operations }
        time = 1_500
        while time < milliseconds - 10_000 {
            let slot = eligible.randomElement(using: &random)!
            let identifier = scheduledIdentifiers.randomElement(using: &random)!.identifier
            let operation: SoakOperation
            if random.chance(15) {
                operation = .cancel(slot: slot, identifier: identifier)
            } else {
                let kind = random.chance(70) ? "refresh" : "processing"
                let delay = random.chance(50) ? Int.random(in: 500...4_000, using: &random) : nil
                operation = .submit(slot: slot, identifier: identifier, kind: kind, earliestBeginMilliseconds: delay)
            }
            operations.append((.milliseconds(time), operation))
            time += Int.random(in: 300...1_500, using: &random)
        }
        return operations
    }

    /// A digest of the schedule, printed so that two runs can be seen to share one.
    var digest: String {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        func mix(_ text: String) {
            for byte in text.utf8 {
                hash ^= UInt64(byte)
                hash &*= 0x100_0000_01B3
            }
        }
        for slot in slots { mix("\(slot.index) \(slot.behaviour.rawValue) \(slot.origin.rawValue) \(slot.seed);") }
        for (time, operation) in operations { mix("\(time) \(operation);") }
        return String(hash, radix: 16)
    }
}
