// bgtask-soak: a soak test of bgtaskd: synthetic apps, faults, evidence gathered outside the daemon, invariants.
// Re-runs itself as the apps (`bgtask-soak app ...`) and the hostile client (`bgtask-soak hostile ...`).

import BGTaskPOSIX
import BGTaskSoakHarness
import Glibc

/// Prints `message` on standard error and exits with `status`.
func fail(_ message: String, status: Int32) -> Never {
    try? FileDescriptor.standardError.writeAll(Array("bgtask-soak: \(message)\n".utf8))
    exit(status)
}

let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first {
case "app":
    guard let options = SoakAppOptions(arguments: Array(arguments.dropFirst())) else {
        fail("app: bad arguments", status: 64)
    }
    exit(SoakApp.run(options))
case "hostile":
    exit(HostileClient.run(arguments: Array(arguments.dropFirst())))
default:
    break
}
let options: SoakOptions
do {
    options = try SoakOptions.parse(arguments)
} catch {
    fail("\(error)\n\(SoakOptions.help)", status: 64)
}
if options.wantsHelp {
    print(SoakOptions.help)
    exit(0)
}
var pathBuffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
let pathLength = readlink("/proc/self/exe", &pathBuffer, Int(PATH_MAX))
guard pathLength > 0 else { fail("cannot read /proc/self/exe", status: 1) }
let executable = String(decoding: pathBuffer[..<pathLength].map { UInt8(bitPattern: $0) }, as: UTF8.self)
do {
    let run = try SoakRun(options: options, executable: executable) { line in
        // Unbuffered, so the seed and the progress show at once even when the output goes to a file.
        try? FileDescriptor.standardOutput.writeAll(Array((line + "\n").utf8))
    }
    let result = try run.run()
    print(result.markdown, terminator: "")
    if let path = options.reportPath { print("report: \(try result.write(to: path).joined(separator: ", "))") }
    let missing = result.faults.filter { $0.value == 0 }.map(\.key.rawValue).sorted()
    if !missing.isEmpty { fail("faults never injected: \(missing.joined(separator: ", "))", status: 1) }
    if !result.report.isPassing {
        let failed = result.report.failedInvariants.map(\.rawValue).joined(separator: ", ")
        if options.seed == nil {
            // A seed found by exploring: once what it found is fixed, it joins the gate (docs/TESTING.md).
            print(
                "seed \(result.seed) found a failure of \(failed); once it is fixed, add it to "
                    + "Tests/soak-gate-seeds.txt (with what it found) so the test suite replays it")
        }
        fail("invariants failed: \(failed)", status: 1)
    }
} catch {
    fail("\(error)", status: 1)
}
