// Launches one program with ProcessLauncher from a descriptor table the tests arrange: the app's output files placed
// at chosen descriptors (0, 1 or 2 among them), descriptors closed or left open without close-on-exec, and reports
// what happened. Run under a seccomp filter (Tests/Fixtures/refuse_syscalls.py), it shows the launcher's fallbacks.
//
// usage: BGTaskLaunchProbe [--output PATH@FD] [--error PATH@FD] [--close FD]... [--leak FD]... -- PROGRAM [ARG]...
//
// --output and --error open PATH (created, truncated) at descriptor FD and give that descriptor to the launch as the
// app's standard output or error (default: this process's own standard error for both). --close closes FD before
// the launch; --leak opens /dev/null at FD without close-on-exec. The report goes to this process's standard output
// as it was at start (saved above the descriptors rearranged), one line each:
//   launched pid=PID pidfd-pid=PID   (pidfd-pid: the Pid: line of the pidfd's /proc/self/fdinfo entry)
//   outcome executed | outcome failed: STEP: MESSAGE
//   exit STATUS
// Exit status 0 once the report is complete, 1 when the launch could not be started, 64 for a usage error.

import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// The report channel: a close-on-exec copy of the standard output this process started with, above every
/// descriptor the arguments may name.
let report = fcntl(1, F_DUPFD_CLOEXEC, 100)

func say(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    _ = bytes.withUnsafeBytes { Glibc.write(report, $0.baseAddress, $0.count) }
}

func fail(_ message: String, status: Int32) -> Never {
    let bytes = Array("BGTaskLaunchProbe: \(message)\n".utf8)
    _ = bytes.withUnsafeBytes { Glibc.write(report >= 0 ? report : 2, $0.baseAddress, $0.count) }
    exit(status)
}

/// Opens `path` at exactly descriptor `target`, without close-on-exec (as a daemon's inherited descriptor would be).
func place(_ path: String, at target: Int32) {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    guard fd >= 0 else { fail("open(\(path)): \(String(cString: strerror(errno)))", status: 1) }
    if fd != target {
        guard dup2(fd, target) == target else { fail("dup2(\(fd), \(target)): errno \(errno)", status: 1) }
        close(fd)
    } else {
        _ = fcntl(fd, F_SETFD, 0)
    }
}

/// `PATH@FD` split at its last `@`.
func placement(_ value: String) -> (path: String, fd: Int32) {
    guard let at = value.lastIndex(of: "@"), let fd = Int32(value[value.index(after: at)...]), fd >= 0, fd < 100
    else { fail("expected PATH@FD (FD below 100), got \(value)", status: 64) }
    return (String(value[..<at]), fd)
}

guard report >= 0 else { exit(1) }
var arguments = CommandLine.arguments.dropFirst()
var output: (path: String, fd: Int32)?
var error: (path: String, fd: Int32)?
var closing: [Int32] = []
var leaking: [Int32] = []
while let option = arguments.first, option != "--" {
    arguments.removeFirst()
    guard let value = arguments.popFirst() else { fail("\(option) needs a value", status: 64) }
    switch option {
    case "--output": output = placement(value)
    case "--error": error = placement(value)
    case "--close", "--leak":
        guard let fd = Int32(value), fd >= 0, fd < 100 else {
            fail("\(option) takes a descriptor below 100", status: 64)
        }
        if option == "--close" { closing.append(fd) } else { leaking.append(fd) }
    default: fail("unknown option \(option)", status: 64)
    }
}
guard arguments.popFirst() == "--", let program = arguments.first else {
    fail(
        "usage: BGTaskLaunchProbe [--output PATH@FD] [--error PATH@FD] [--close FD]... [--leak FD]... -- PROGRAM",
        status: 64)
}
guard let path = ProcessLauncher.resolve(program, searchPath: ProcessLauncher.defaultSearchPath) else {
    fail("no program \(program)", status: 64)
}

if let output { place(output.path, at: output.fd) }
if let error { place(error.path, at: error.fd) }
for fd in closing { close(fd) }
for fd in leaking {
    let null = open("/dev/null", O_RDONLY)
    if null != fd {
        guard null >= 0, dup2(null, fd) == fd else { fail("dup2 onto \(fd): errno \(errno)", status: 1) }
        close(null)
    }
}

let spec = LaunchSpec(
    program: path, arguments: Array(arguments), environment: ["PATH=" + ProcessLauncher.defaultSearchPath],
    cgroupProcsFiles: [], standardOutput: FileDescriptor(rawValue: output?.fd ?? report),
    standardError: FileDescriptor(rawValue: error?.fd ?? 2), user: nil, workingDirectory: "/")
let handshake: LaunchHandshake
do {
    handshake = try ProcessLauncher.start(spec)
} catch {
    fail("launch: \(error)", status: 1)
}
let child = handshake.child
// The pidfd names the process clone returned, not one that happens to have its pid later.
let fdinfo =
    (try? FileDescriptor.readText(
        atPath: "/proc/self/fdinfo/\(child.pidFD.fileDescriptor.rawValue)",
        limit: 4096)) ?? ""
let pidfdPid =
    fdinfo.split(separator: "\n").first { $0.hasPrefix("Pid:") }.map {
        String($0.dropFirst(4).filter { $0 != " " && $0 != "\t" })
    } ?? "?"
say("launched pid=\(child.pid) pidfd-pid=\(pidfdPid)")

// The handshake: end of file once the child has exec'd, or its report; bounded.
var outcome = LaunchHandshake.Outcome.pending
for _ in 0..<200 where outcome == .pending {
    _ = try? handshake.pipe.poll(for: .readable, timeout: .milliseconds(100))
    outcome = handshake.outcome()
}
switch outcome {
case .pending: say("outcome pending")
case .executed: say("outcome executed")
case .failed(let launchError): say("outcome failed: \(launchError)")
}
handshake.close()

// Waited for through the pidfd, bounded: a program that outlives 20 s is killed.
let exited = (try? child.pidFD.waitForExit(timeout: .seconds(20))) ?? false
if !exited { try? child.pidFD.sendSignal(.kill) }
switch Result(catching: { () throws(Errno) -> ExitStatus in try child.waitForExit() }) {
case .success(let status): say("exit \(status)")
case .failure(let waitError): say("exit unknown: \(waitError)")
}
exit(0)
