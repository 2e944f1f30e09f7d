// bgtask-bench: measures bgtaskd's costs. Build with `swift run -c release bgtask-bench MODE`.

import BGTaskBenchmarks
import BGTaskPOSIX
import Foundation
import Glibc

let usage = """
    usage: bgtask-bench MODE
      all [--write-docs]
              core --populations 100,1000,10000, ipc --pin --rounds 10, ipc, scale and reclaim --rounds 10 in
              one run (a few minutes), each printing its own lines, then one table: every headline figure
              beside its same-run floor or reference, the ratio, the aim and a verdict (a miss is reported, not
              an error; a mode that fails is a failed row and the exit status is 1). --write-docs replaces the
              section between the `<!-- bgtask-bench all: begin/end -->` markers of docs/PERFORMANCE.md (found
              above this executable or the current directory) with the table, the date and the command; a run
              with a failed mode writes nothing
      core [--populations N,N,...]
              policy core ns/op for lease begin+end and deadline processing at 100, 10k and 100k live leases
      ipc     lease begin+end through a private bgtaskd with 1, 16 and 64 clients: calls/s, p50/p99, next
              to a raw Unix-socket ping-pong of the same message sizes measured in the same run
      ipc --pin [--rounds N]
              one client, pinned with sched_setaffinity: across CPUs (the client thread on the first CPU this
              process may use, every thread of the server on the second; unavailable with one CPU), then on the
              same CPU; per placement N rounds (default 20) of 1,000 leases with bgtaskd and as many with the raw
              echo server, taking turns; reports p50/p99 µs per round trip (one request and its reply: a lease's
              begin and its end are one each) for both, the p50 ratio, and a verdict against the aims (bgtaskd
              p50 within 1.25x raw across CPUs, 3x on the same CPU; a miss is reported, not an error)
      deadlines [--apps N] [--duration D] [--socket PATH]
              N apps (default 100) churn for D (default 30s) through background, lease, expiration warning,
              suspension and foreground, posting to each other, while uid nobody calls GetStatus, ListApps and
              History in a loop with bursts of 40 pipelined GetStatus; reports how late backgroundTaskExpiring
              reaches the apps against its due time (p50/p99/max ms), the churn per second, and a verdict against
              the aim (p99 under 5 ms). Starts a private bgtaskd unless --socket names a running one, which must
              allow BackgroundTimeSec over 2s and ExpirationWarningSec of 500ms or more, and let nobody reach PATH
      reclaim [--rounds N] [--systemd]
              per backend configuration this host has (cgroup2 freeze + v1 memory, v1 freezer + v1 memory: as
              root; SIGSTOP + PSS), a private bgtaskd with AppsMemoryMax and no warning grace, and N rounds
              (default 20) in which a foreground app takes the apps over the limit while a suspended 64 MiB app
              is the heaviest suspended one; reports p50, p99 and max ms from the crossing to the victim dead
              (its pidfd readable), p50 and max to its memory freed, the daemon's recorded trigger-to-kill
              latency, and a verdict against the aim (p50 to dead under 10 ms with a pressure trigger, 50 ms
              polling). --systemd runs the same rounds with the daemon as its installed user units under a
              contained systemd --user manager (as root; scripts/install of the bgtaskd and bgtask beside this
              executable, the daemon started by its socket) and the apps launched as transient units of that
              manager, all within a 1 GiB memory cgroup; its row, "unit: ...", names how the daemon froze and
              measured them; the manager, its units and its cgroups are gone at the end, Ctrl-C included
      scale [--apps N] [--tasks-per-app M] [--calls K]
              a private bgtaskd grown to N apps (default 1000), each registered on a connection of its own held
              open and staying in the foreground, then M open leases on each (default 50), all counted by
              GetStatus; reports the daemon's RSS (VmRSS), peak (VmHWM) and open fds empty, with the apps and with
              the leases, the p50/p99 µs of K round trips (default 20000, an even number; at most 20 s each) of
              one app's lease begin and end with that app alone and at full size, the p50 ratio, and verdicts
              against the aims (p50 at size within 1.5x; RSS at most 12 MiB empty, 16 MiB with 1,000 apps, 24 MiB
              with 50,000 leases more; a miss is reported, not an error)
    """

/// Prints `message` on standard error and exits with `status`.
func fail(_ message: String, status: Int32) -> Never {
    // Nothing is left to report a failing write of the failure message to.
    try? FileDescriptor.standardError.writeAll(Array("bgtask-bench: \(message)\n".utf8))
    exit(status)
}

let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first {
case "core":
    var benchmark = CoreBenchmark()
    if arguments.count == 3, arguments[1] == "--populations" {
        let populations = arguments[2].split(separator: ",").compactMap { Int($0) }.filter { $0 > 0 }
        guard !populations.isEmpty else { fail("--populations takes positive integers\n\(usage)", status: 64) }
        benchmark.populations = populations
    } else if arguments.count != 1 {
        fail("unexpected arguments\n\(usage)", status: 64)
    }
    do {
        for line in try benchmark.run().lines { print(line) }
    } catch {
        fail("the policy refused a benchmark step: \(error)", status: 1)
    }
case "all":
    let benchmark: AllBenchmark
    switch AllBenchmark.parse(Array(arguments.dropFirst())) {
    case .success(let parsed): benchmark = parsed
    case .failure(let error): fail("all: \(error)\n\(usage)", status: 64)
    }
    let executablesDirectory: String
    var documentPath: String?
    do {
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        executablesDirectory = (executable as NSString).deletingLastPathComponent
        // Found before the run, so a missing document does not cost one.
        if benchmark.writesDocs {
            documentPath = try PerformanceDocument.locate(
                from: [executablesDirectory, FileManager.default.currentDirectoryPath])
        }
    } catch {
        fail("all: \(error)", status: 1)
    }
    let summary = benchmark.run(executablesDirectory: executablesDirectory)
    print("== summary ==")
    for line in summary.lines { print(line) }
    if summary.hasFailure {
        fail(
            "all: a mode failed" + (documentPath == nil ? "" : "; \(PerformanceDocument.relativePath) left as it was"),
            status: 1)
    }
    if let documentPath {
        do {
            try AllBenchmark.writeDocs(summary, to: documentPath)
            print("wrote the summary into \(documentPath)")
        } catch {
            fail("all: \(error)", status: 1)
        }
    }
case "ipc" where arguments.count == 1:
    do {
        for line in try IPCBenchmark().run().lines { print(line) }
    } catch {
        fail("\(error)", status: 1)
    }
case "ipc":
    let benchmark: IPCPlacementBenchmark
    switch IPCPlacementBenchmark.parse(Array(arguments.dropFirst())) {
    case .success(let parsed): benchmark = parsed
    case .failure(let error): fail("ipc: \(error)\n\(usage)", status: 64)
    }
    do {
        for line in try benchmark.run().lines { print(line) }
    } catch {
        fail("ipc --pin: \(error)", status: 1)
    }
case "ipc-echo-server" where arguments.count == 2:
    do {
        exit(try runEchoServer(path: arguments[1]))
    } catch {
        fail("echo server: \(error)", status: 1)
    }
case "deadlines":
    do {
        let options = try DeadlineBenchmark.options(
            Array(arguments.dropFirst()), allowed: ["--apps", "--duration", "--socket"])
        // bgtaskd and this executable are built side by side.
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        var configuration = DeadlineBenchmark.Configuration(
            executablesDirectory: (executable as NSString).deletingLastPathComponent)
        configuration.apps = options.apps ?? configuration.apps
        configuration.duration = options.duration ?? configuration.duration
        configuration.socketPath = options.socketPath
        for line in try DeadlineBenchmark(configuration: configuration).run().lines { print(line) }
    } catch let error as DeadlineBenchmark.UsageError {
        fail("deadlines: \(error)\n\(usage)", status: 64)
    } catch {
        fail("deadlines: \(error)", status: 1)
    }
case "reclaim":
    var rounds = 20
    var isSystemd = false
    var options = arguments.dropFirst()
    while let option = options.popFirst() {
        switch option {
        case "--rounds":
            guard let count = options.popFirst().flatMap({ Int($0) }), count > 0 else {
                fail("reclaim: --rounds takes a positive integer\n\(usage)", status: 64)
            }
            rounds = count
        case "--systemd" where !isSystemd:
            isSystemd = true
        default:
            fail("reclaim: unexpected argument \(option)\n\(usage)", status: 64)
        }
    }
    do {
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        var configuration = ReclaimBenchmark.Configuration(
            executablesDirectory: (executable as NSString).deletingLastPathComponent)
        configuration.rounds = rounds
        if isSystemd { configuration.backends = [.unit] }
        let report = try ReclaimBenchmark(configuration: configuration).run()
        for line in report.lines { print(line) }
        if !report.isComplete { exit(1) }
    } catch {
        fail("reclaim: \(error)", status: 1)
    }
case "scale":
    let benchmark: ScaleBenchmark
    switch ScaleBenchmark.parse(Array(arguments.dropFirst())) {
    case .success(let parsed): benchmark = parsed
    case .failure(let error): fail("scale: \(error)\n\(usage)", status: 64)
    }
    do {
        for line in try benchmark.run().lines { print(line) }
    } catch {
        fail("scale: \(error)", status: 1)
    }
// The launched app of the reclaim benchmark: the suspended victim, or the foreground app that crosses the limit.
case "reclaim-app":
    guard let options = ReclaimApp.Options(arguments: Array(arguments.dropFirst())) else {
        fail(
            "usage: bgtask-bench reclaim-app --role victim|trigger [--alloc-mib N] [--control PATH] --lifetime S",
            status: 64)
    }
    exit(ReclaimApp.run(options))
// Hidden modes the deadline benchmark runs itself in: an app's stand-in process, and the status flooder.
case "app-process":
    guard let options = try? DeadlineBenchmark.options(Array(arguments.dropFirst()), allowed: ["--socket"]),
        let socketPath = options.socketPath
    else { fail("usage: bgtask-bench app-process --socket PATH", status: 64) }
    exit(DeadlineBenchmark.runAppProcess(socketPath: socketPath))
case "status-flood":
    guard
        let options = try? DeadlineBenchmark.options(
            Array(arguments.dropFirst()), allowed: ["--socket", "--duration"]),
        let socketPath = options.socketPath, let duration = options.duration
    else { fail("usage: bgtask-bench status-flood --socket PATH --duration D", status: 64) }
    exit(DeadlineBenchmark.runStatusFlood(socketPath: socketPath, duration: duration))
case "-h", "--help", "help":
    print(usage)
default:
    fail("unknown or missing mode\n\(usage)", status: 64)
}
