// ProcessLauncher from descriptor tables a daemon can have: the app's streams at 0, 1 or 2, the error pipe among
// them, and kernels or filters that refuse clone3 or close_range. Each launch runs in BGTaskLaunchProbe, whose
// descriptors the test may rearrange without touching the test process's own.
import BGTaskPOSIX
import BGTaskSystem
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

/// What BGTaskLaunchProbe reported, and what the app wrote into the files given as its streams.
struct ProbeReport {
    /// Its `launched`, `outcome` and `exit` lines, by their first word; `launch` carries a failed start.
    var lines: [String: String] = [:]
    var output = ""
    var error = ""
    /// Everything it printed, for failure messages.
    var transcript = ""
}

/// Runs BGTaskLaunchProbe with `options` and `command` (under a seccomp filter refusing `refusing` with ENOSYS when
/// it is not empty), the app's output and error given as files the probe places at `outputFD` and `errorFD`.
func probeLaunch(
    _ command: [String], outputFD: Int32, errorFD: Int32, options: [String] = [], refusing: [String] = []
) throws -> ProbeReport {
    let scratch = try ScratchDirectory(prefix: "launch-probe")
    defer { scratch.remove() }
    let outputPath = scratch.path + "/output"
    let errorPath = scratch.path + "/error"
    var arguments = [
        try Products.path("BGTaskLaunchProbe"), "--output", "\(outputPath)@\(outputFD)", "--error",
        "\(errorPath)@\(errorFD)",
    ]
    arguments += options + ["--"] + command
    if !refusing.isEmpty {
        arguments =
            [
                "/usr/bin/env", "python3", Products.packageRoot + "/Tests/Fixtures/refuse_syscalls.py",
                refusing.joined(separator: ","),
            ] + arguments
    }
    let run = try runProgram(arguments)
    var report = ProbeReport(transcript: "exit status \(run.status):\n\(run.output)")
    for line in run.output.split(separator: "\n") {
        let parts = line.split(separator: " ", maxSplits: 1)
        if let word = parts.first, ["launched", "outcome", "exit"].contains(word) {
            report.lines[String(word)] = parts.count > 1 ? String(parts[1]) : ""
        } else if line.hasPrefix("BGTaskLaunchProbe: ") {
            report.lines["launch"] = String(line.dropFirst("BGTaskLaunchProbe: ".count))
        }
    }
    report.output = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "(unreadable)"
    report.error = (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? "(unreadable)"
    return report
}

/// Whether the pid the launch returned and the pid its pidfd names (the `launched` line) are the same process.
func pidfdNamesTheChild(_ report: ProbeReport) -> Bool {
    guard let launched = report.lines["launched"] else { return false }
    let fields = Dictionary(
        launched.split(separator: " ").compactMap { field -> (String, String)? in
            let pair = field.split(separator: "=", maxSplits: 1)
            return pair.count == 2 ? (String(pair[0]), String(pair[1])) : nil
        }, uniquingKeysWith: { first, _ in first })
    guard let pid = fields["pid"], let pidfdPid = fields["pidfd-pid"] else { return false }
    return Int(pid) != nil && pid == pidfdPid
}

/// A seccomp filter can be installed by refuse_syscalls.py: the kernel has seccomp (a `Seccomp:` line in
/// /proc/self/status).
let seccompFilters = HostRequirement(
    unavailableReason: ((try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? "")
        .contains("\nSeccomp:") ? nil : "the kernel has no seccomp (no Seccomp: line in /proc/self/status)")

/// The descriptors the app saw open (`ls /proc/self/fd` as its output), as numbers.
func descriptors(in listing: String) -> Set<Int> {
    Set(listing.split(separator: "\n").compactMap { Int($0) })
}

@Suite("ProcessLauncher")
struct ProcessLauncherTests {
    /// The app writes "out" to its standard output and "err" to its standard error.
    static let twoStreams = ["sh", "-c", "echo out; echo err >&2"]

    /// The daemon's descriptors for the app's streams may be 0, 1 or 2 themselves (a daemon started with its
    /// standard streams closed opens its log files there): each stream still lands in its own file. A row per
    /// placement; before the child moved its sources above 2 before the first dup3, every row but (1, 2) and (1, 5)
    /// failed (an output at 0 was overwritten by /dev/null, an error at 0 or 1 by the output or /dev/null).
    @Test(
        "each stream lands in its own file wherever the daemon holds the descriptors",
        arguments: [(1, 2), (0, 2), (1, 0), (0, 1), (2, 1), (2, 0), (1, 5), (5, 0)] as [(Int32, Int32)])
    func streamsLandInTheirFiles(outputFD: Int32, errorFD: Int32) async throws {
        try await offThePool {
            let report = try probeLaunch(Self.twoStreams, outputFD: outputFD, errorFD: errorFD)
            #expect(report.lines["outcome"] == "executed", "\(report.transcript)")
            #expect(report.lines["exit"] == "exited with status 0", "\(report.transcript)")
            #expect(report.output == "out\n", "output at fd \(outputFD), error at fd \(errorFD)")
            #expect(report.error == "err\n", "output at fd \(outputFD), error at fd \(errorFD)")
        }
    }

    /// With 0, 1 and 2 free, the launcher's own /dev/null and error pipe are allocated there (the pipe's write end
    /// at 2): a failure after the streams are set (exec of a file that is no program) still reaches the parent,
    /// not the app's error file, and the handshake does not read end of file before the child exits. Failed before
    /// the error pipe moved above 2: the dup3 onto 2 closed the child's pipe, the handshake read end of file
    /// ("executed"), and the child's report went into the app's error file.
    @Test("a failure after the streams are set reaches the handshake when the error pipe was at 0, 1 or 2")
    func errorPipeBelowThreeSurvivesTheStreams() async throws {
        try await offThePool {
            let scratch = try ScratchDirectory(prefix: "launch-not-a-program")
            defer { scratch.remove() }
            let notAProgram = try scratch.write("not-a-program", "neither ELF nor #!\n")
            #expect(chmod(notAProgram, 0o755) == 0)
            let report = try probeLaunch(
                [notAProgram], outputFD: 5, errorFD: 6, options: ["--close", "0", "--close", "1", "--close", "2"])
            #expect(
                report.lines["outcome"] == "failed: executing \(notAProgram): \(Errno(rawValue: ENOEXEC).message)",
                "\(report.transcript)")
            #expect(report.lines["exit"] == "exited with status 127", "\(report.transcript)")
            #expect(report.output.isEmpty && report.error.isEmpty, "the report went into the app's streams")
        }
    }

    /// The filter the tests below rely on really refuses the calls: clone3 and close_range with ENOSYS.
    @Test(
        "refuse_syscalls.py makes clone3 and close_range fail with ENOSYS",
        .requires(seccompFilters, .programs("python3")))
    func filterRefusesTheCalls() async throws {
        try await offThePool {
            let script = """
                import ctypes, errno
                libc = ctypes.CDLL(None, use_errno=True)
                for number in (435, 436):
                    result = libc.syscall(number, 0, 0, 0)
                    print(number, result, errno.errorcode.get(ctypes.get_errno(), "0"))
                """
            let run = try runProgram([
                "/usr/bin/env", "python3", Products.packageRoot + "/Tests/Fixtures/refuse_syscalls.py",
                "clone3,close_range", "/usr/bin/env", "python3", "-c", script,
            ])
            #expect(run.status == 0, "\(run.output)")
            #expect(run.output == "435 -1 ENOSYS\n436 -1 ENOSYS\n")
        }
    }

    /// Where a seccomp filter answers clone3 with ENOSYS (systemd's RestrictNamespaces= does), the launcher falls
    /// back to clone with CLONE_PIDFD: the app starts, and its pidfd (from the clone itself) names it and reports
    /// its exit. Failed before the fallback: the launch threw "clone3: Function not implemented".
    @Test(
        "without clone3 the app starts through clone, with a pidfd that names it",
        .requires(seccompFilters, .programs("python3")))
    func cloneFallback() async throws {
        try await offThePool {
            let report = try probeLaunch(
                ["sh", "-c", "echo out; echo err >&2; exit 3"], outputFD: 5, errorFD: 6, refusing: ["clone3"])
            #expect(report.lines["launch"] == nil, "\(report.transcript)")
            #expect(pidfdNamesTheChild(report), "\(report.transcript)")
            #expect(report.lines["outcome"] == "executed", "\(report.transcript)")
            #expect(report.lines["exit"] == "exited with status 3", "\(report.transcript)")
            #expect(report.output == "out\n" && report.error == "err\n", "\(report.transcript)")
        }
    }

    /// Nothing of the daemon's but the three streams reaches the app: descriptors left open without close-on-exec
    /// (7 and 40 here, and any the test runner left so) are marked close-on-exec by close_range, or one by one
    /// where close_range is refused (kernels before 5.11, or a filter). A row per refusal; the rows refusing
    /// close_range failed before the fallback (7 and 40 reached the app), the last one already for clone3.
    @Test(
        "no other descriptor reaches the app, with or without close_range and clone3",
        .requires(seccompFilters, .programs("python3")),
        arguments: [[], ["close_range"], ["clone3", "close_range"]] as [[String]])
    func otherDescriptorsCloseOnExec(refusing: [String]) async throws {
        try await offThePool {
            let report = try probeLaunch(
                ["ls", "/proc/self/fd"], outputFD: 1, errorFD: 2, options: ["--leak", "40", "--leak", "7"],
                refusing: refusing)
            #expect(report.lines["exit"] == "exited with status 0", "\(report.transcript)")
            let seen = descriptors(in: report.output)
            // 0, 1 and 2, and the one ls opened to list them.
            #expect(seen.isSuperset(of: [0, 1, 2]) && seen.allSatisfy { $0 <= 3 }, "the app saw \(seen.sorted())")
        }
    }

    /// When close_range fails and so does the fallback (here a filter also refuses fcntl's F_GETFD), the app is not
    /// started with the daemon's descriptors: the child reports the step of its own and exits 127. Before, the
    /// result of close_range was ignored and the app ran.
    @Test(
        "a failure to mark the other descriptors close-on-exec is reported as its own step",
        .requires(seccompFilters, .programs("python3")))
    func descriptorFailureIsReported() async throws {
        try await offThePool {
            let report = try probeLaunch(
                ["sh", "-c", "echo started"], outputFD: 5, errorFD: 6, refusing: ["close_range", "fcntl-getfd"])
            let message = Errno(rawValue: ENOSYS).message
            #expect(
                report.lines["outcome"] == "failed: marking the daemon's other descriptors close-on-exec: \(message)",
                "\(report.transcript)")
            #expect(report.lines["exit"] == "exited with status 127", "\(report.transcript)")
            #expect(report.output.isEmpty, "the app ran: \(report.output)")
        }
    }
}
