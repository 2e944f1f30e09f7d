// Running a program to completion and collecting what it printed.

import BGTaskPOSIX
import Foundation

/// Runs a program to completion (with `environment` added to the test's), its standard output and error together;
/// its exit status (128 plus the signal's number when a signal ended it) and what it printed.
///
/// Spawned by `ProcessSpawner` (stdin from `/dev/null`, no descriptor of the test process beyond the pipe it prints
/// to) through a close-on-exec pipe, so no other child spawned meanwhile inherits the pipe and holds its end of file
/// back.
public func runProgram(_ arguments: [String], environment: [String: String] = [:]) throws -> (
    status: Int32, output: String
) {
    let variables = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    let (readEnd, writeEnd) = try FileDescriptor.pipe()
    let child: SpawnedProcess
    do {
        // Closed here once the child has its copies (or the spawn failed), so the read below ends with the child.
        defer { try? writeEnd.close() }  // A pipe's end: nothing is lost by a failed close.
        child = try ProcessSpawner.spawn(
            arguments,
            options: SpawnOptions(
                standardOutput: .fileDescriptor(writeEnd), standardError: .fileDescriptor(writeEnd),
                environment: variables.map { "\($0.key)=\($0.value)" }))
    } catch {
        try? readEnd.close()  // The spawn's failure is the error to report.
        throw error
    }
    defer { try? child.pidFD.close() }  // A pidfd: nothing is lost by a failed close.
    // Read to the end whatever its length: a child blocked on a full pipe would never exit.
    let output = try readEnd.closeAfter { try readEnd.readToEnd(limit: .max) }
    let status: Int32
    switch try child.waitForExit() {
    case .exited(let code): status = code
    case .signaled(let signal): status = 128 + signal.rawValue
    }
    return (status, String(decoding: output, as: UTF8.self))
}
