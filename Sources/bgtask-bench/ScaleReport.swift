// The scale benchmark's table: the daemon's memory and descriptors at three sizes, lease latency empty and at
// size, and a verdict against each aim.

import Foundation

/// What `bgtask-bench scale` measured, and the lines it prints.
struct ScaleReport {
    /// Apps registered (`--apps`).
    var apps: Int
    /// Leases opened on each app (`--tasks-per-app`).
    var tasksPerApp: Int
    /// Round trips asked for per latency measurement (`--calls`); fewer when the time budget ran out first.
    var calls: Int
    /// The daemon right after it was ready, with no client.
    var empty: DaemonFootprint
    /// The daemon with every app registered and no lease open.
    var withApps: DaemonFootprint
    /// The daemon with every app registered and every lease open.
    var withTasks: DaemonFootprint
    /// Round trips with one app registered, in nanoseconds, ascending.
    var baselineNanoseconds: [Int64]
    /// Round trips with every app registered and every lease open, in nanoseconds, ascending.
    var atSizeNanoseconds: [Int64]
    /// Seconds to register every app but the first.
    var registrationSeconds: Double
    /// Seconds to open every lease.
    var openingSeconds: Double
    /// Events the apps' streams carried after their first replies.
    var eventsRead: Int
    /// The daemon's state file with every app and lease, in bytes.
    var stateFileBytes: Int
    /// The live apps `GetStatus` counted at size, after the round trips there.
    var countedApps: Int
    /// The open leases `GetStatus` counted at size, after the round trips there.
    var countedTasks: Int
    /// Whether the daemon saved its state on a memory filesystem, as a service does in `/run`.
    var savesOnMemoryFileSystem: Bool
    /// Whether the daemon maps the Swift runtime as a shared library (`swift build`) rather than linking it
    /// statically (`scripts/install`), which makes its resident memory larger.
    var linksRuntimeDynamically: Bool

    /// The size the issue's memory aims are stated for: apps, and leases on each.
    static let aimedApps = 1_000
    /// Leases per app in the issue's memory aim with tasks.
    static let aimedTasksPerApp = 50
    /// The issue's aim for idle memory, in MiB.
    static let emptyAimMiB = 12.0
    /// The issue's aim with 1,000 apps registered, in MiB: 4 MiB over idle, about 4 KiB per app.
    static let appsAimMiB = 16.0
    /// The issue's aim with 1,000 apps and 50,000 open leases, in MiB: 8 MiB more, about 170 bytes per lease.
    static let tasksAimMiB = 24.0
    /// The issue's aim for a lease round trip at size: its p50 within 1.5 times the p50 with one app, so the cost of
    /// a call does not grow with what the daemon holds.
    static let latencyRatioAim = 1.5

    /// The p50 at size as a multiple of the p50 with one app.
    var latencyRatio: Double {
        percentileMicroseconds(atSizeNanoseconds, 0.5) / percentileMicroseconds(baselineNanoseconds, 0.5)
    }

    /// Whether the run is the size the memory aims with apps are stated for.
    var isAimedSize: Bool { apps == Self.aimedApps && tasksPerApp == Self.aimedTasksPerApp }

    /// The report as printed: the footprint table, the latency table, the verdicts and the notes.
    var lines: [String] { footprintTable + [""] + latencyTable + [""] + verdicts + notes }

    /// The row names of the footprint table, in order.
    private var footprintRowNames: [String] { ["empty", "\(apps) apps", "\(apps) apps + \(apps * tasksPerApp) tasks"] }

    /// The daemon's resident memory and descriptors at each size.
    private var footprintTable: [String] {
        let rows = zip(footprintRowNames, [empty, withApps, withTasks])
        return [
            "scale: \(apps) apps, each registered on a connection of its own held open, in the foreground; "
                + "\(tasksPerApp) unnamed leases open on each",
            column("daemon", 26) + pad("RSS MiB", 9) + pad("fds", 8) + pad("peak MiB", 10),
        ]
            + rows.map { name, footprint in
                column(name, 26) + pad(String(format: "%.1f", footprint.residentMiB), 9)
                    + pad(String(footprint.descriptors), 8) + pad(String(format: "%.1f", footprint.peakResidentMiB), 10)
            }
    }

    /// p50 and p99 per round trip with one app and at size, and their ratio.
    private var latencyTable: [String] {
        let rows = [
            ("1 app", baselineNanoseconds), ("\(apps) apps + \(apps * tasksPerApp) tasks", atSizeNanoseconds),
        ]
        return [
            "lease round trips of one app on one connection, one client thread: BeginBackgroundTask, then "
                + "EndBackgroundTask, each one request and its reply",
            column("daemon", 26) + pad("calls", 8) + pad("p50 µs", 9) + pad("p99 µs", 9) + pad("p50 ratio", 11),
        ]
            + rows.map { name, latencies in
                column(name, 26) + pad(String(latencies.count), 8)
                    + pad(format(percentileMicroseconds(latencies, 0.5)), 9)
                    + pad(format(percentileMicroseconds(latencies, 0.99)), 9)
                    + pad(
                        String(
                            format: "%.2f",
                            percentileMicroseconds(latencies, 0.5) / percentileMicroseconds(baselineNanoseconds, 0.5)),
                        11)
            }
    }

    /// One line per aim: meets or misses, or why it was not judged at this size.
    private var verdicts: [String] {
        let sizeNote = "not judged: the aim is for \(Self.aimedApps) apps with \(Self.aimedTasksPerApp) leases each"
        return [
            "verdicts against the issue's aims (a miss is reported, not an error):",
            "  lease p50 at size \(String(format: "%.2f", latencyRatio))x the p50 with 1 app: "
                + judge(latencyRatio <= Self.latencyRatioAim) + " the aim (within \(format(Self.latencyRatioAim))x)",
            "  RSS empty \(String(format: "%.1f", empty.residentMiB)) MiB: "
                + judge(empty.residentMiB <= Self.emptyAimMiB) + " the aim (at most \(format(Self.emptyAimMiB)) MiB)",
            "  RSS with \(apps) apps \(String(format: "%.1f", withApps.residentMiB)) MiB: "
                + (isAimedSize
                    ? judge(withApps.residentMiB <= Self.appsAimMiB)
                        + " the aim (at most \(format(Self.appsAimMiB)) MiB)"
                    : sizeNote),
            "  RSS with \(apps) apps + \(apps * tasksPerApp) tasks \(String(format: "%.1f", withTasks.residentMiB)) MiB: "
                + (isAimedSize
                    ? judge(withTasks.residentMiB <= Self.tasksAimMiB)
                        + " the aim (at most \(format(Self.tasksAimMiB)) MiB)"
                    : sizeNote),
        ]
    }

    /// How the numbers were made, and what they include.
    private var notes: [String] {
        [
            "GetStatus at size, before and after the round trips there: \(countedApps) apps, \(countedTasks) open "
                + "leases (\(apps) x \(tasksPerApp)); the apps' streams carried \(eventsRead) events, none closed",
            "registered \(apps - 1) apps in \(String(format: "%.1f", registrationSeconds)) s "
                + "(\(ScaleFleet.registrationBatch) connections at a time); opened \(apps * tasksPerApp) leases in "
                + "\(String(format: "%.1f", openingSeconds)) s (\(LeaseOpener.connectionCount) connections, "
                + "\(LeaseOpener.window) calls in flight on each, closed before the reading after)",
            "fds: the daemon's /proc/PID/fd; with apps they include a connection per app and the client's; the apps "
                + "all register from this process, so the daemon holds one pidfd for them (one per app's process "
                + "otherwise); peak: VmHWM",
            "the round trips at size are the first app's, with its \(tasksPerApp) leases open (TasksPerAppMax="
                + "\(tasksPerApp + 1)); each measurement follows \(ScaleBenchmark.warmUpLeases) leases not counted"
                + budgetNote,
            "the daemon's state file at size: \(stateFileSize); a change is acknowledged once the state holding it is "
                + "saved",
            linksRuntimeDynamically
                ? "bgtaskd maps the Swift runtime as shared libraries (swift build); scripts/install links it "
                    + "statically (--static-swift-stdlib), which leaves less resident"
                : "bgtaskd has the Swift runtime linked statically, as scripts/install builds it",
            savesOnMemoryFileSystem
                ? "bgtaskd saved its state on a memory filesystem, as a service's /run is"
                : "bgtaskd saved its state under $TMPDIR (no memory filesystem here: a service's /run is one, so calls "
                    + "there cost less)",
        ]
    }

    /// The state file's size in MiB, or in KiB under one MiB.
    private var stateFileSize: String {
        stateFileBytes >= 1 << 20
            ? String(format: "%.1f MiB", Double(stateFileBytes) / Double(1 << 20)) : "\(stateFileBytes >> 10) KiB"
    }

    /// Which measurement, if any, stopped at the time budget before making `calls` round trips.
    private var budgetNote: String {
        let seconds = "\(ScaleBenchmark.measurementBudget.components.seconds) s"
        let stopped = [("with 1 app", baselineNanoseconds), ("at size", atSizeNanoseconds)]
            .filter { $0.1.count < calls }
            .map { "\($0.0) after \($0.1.count) of \(calls)" }
        return stopped.isEmpty
            ? "; each made all \(calls) round trips within its budget of \(seconds)"
            : "; stopped at the budget of \(seconds): " + stopped.joined(separator: ", ")
    }

    /// "meets" or "misses".
    private func judge(_ isMet: Bool) -> String { isMet ? "meets" : "misses" }

    /// `text` padded on the right to `width`.
    private func column(_ text: String, _ width: Int) -> String {
        text.count >= width ? text + " " : text + String(repeating: " ", count: width - text.count)
    }
}
