// Running a program to completion and collecting what it printed.

import Foundation

/// Runs a program to completion (with `environment` added to the test's), its standard output and error together;
/// its exit status and what it printed.
public func runProgram(_ arguments: [String], environment: [String: String] = [:]) throws -> (
    status: Int32, output: String
) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: arguments[0])
    process.arguments = Array(arguments.dropFirst())
    process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    let output = Pipe()
    process.standardOutput = output
    process.standardError = output
    try process.run()
    let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    return (process.terminationStatus, text)
}
