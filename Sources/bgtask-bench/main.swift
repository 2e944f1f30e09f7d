// bgtask-bench: measures bgtaskd's costs. Build with `swift run -c release bgtask-bench MODE`.

import BGTaskSystem
import Glibc

let usage = """
    usage: bgtask-bench MODE
      core [--populations N,N,...]
              policy core ns/op for lease begin+end and deadline processing at 100, 10k and 100k live leases
      ipc     lease begin+end through a private bgtaskd with 1, 16 and 64 clients: calls/s, p50/p99, next
              to a raw Unix-socket ping-pong of the same message sizes measured in the same run
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
        for line in try benchmark.run() { print(line) }
    } catch {
        fail("the policy refused a benchmark step: \(error)", status: 1)
    }
case "ipc":
    do {
        for line in try IPCBenchmark().run() { print(line) }
    } catch {
        fail("\(error)", status: 1)
    }
case "ipc-echo-server" where arguments.count == 2:
    do {
        exit(try runEchoServer(path: arguments[1]))
    } catch {
        fail("echo server: \(error)", status: 1)
    }
case "-h", "--help", "help":
    print(usage)
default:
    fail("unknown or missing mode\n\(usage)", status: 64)
}
