// Shared helpers of the protocol tests: sample values, JSON inspection, IDL conformance, a PRNG, a Python runner.
import BGTaskIDL
import BGTaskJSON
import BGTaskProtocol
import Foundation
import Testing

/// The package's root directory, found from this file's compile-time path (Tests/BGTaskProtocolTests/...).
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

/// The parsed `io.bgtask.Lifecycle` description embedded in the module.
let lifecycleDefinition: VarlinkInterfaceDefinition = {
    do {
        return try VarlinkInterfaceDefinition(parsing: LifecycleInterface.description)
    } catch {
        fatalError("the embedded io.bgtask.Lifecycle description does not parse: \(error)")
    }
}()

/// The parsed `org.varlink.service` description embedded in the module.
let serviceDefinition: VarlinkInterfaceDefinition = {
    do {
        return try VarlinkInterfaceDefinition(parsing: VarlinkServiceInterface.description)
    } catch {
        fatalError("the embedded org.varlink.service description does not parse: \(error)")
    }
}()

/// A framed message as a JSON value, the NUL removed; records a test failure and returns null when it is not JSON.
func jsonValue(ofFramed message: [UInt8]) -> JSONValue {
    #expect(message.last == 0, "a framed message ends with NUL")
    do {
        return try JSONDecoder().decode(JSONValue.self, from: Data(message.dropLast()))
    } catch {
        Issue.record("not JSON: \(error)")
        return .null
    }
}

/// The message without its NUL, as the frame decoder would return it.
func unframed(_ message: [UInt8]) -> [UInt8] { Array(message.dropLast()) }

/// A message from a string, unframed.
func message(_ text: String) -> Data { Data(text.utf8) }

/// A JSON text from a value (for building hostile calls from valid ones).
func jsonText(_ value: JSONValue) -> String {
    do {
        return String(decoding: try JSONEncoder().encode(value), as: UTF8.self)
    } catch {
        Issue.record("cannot encode \(value): \(error)")
        return "null"
    }
}

/// Checks `value` against an IDL type (`VarlinkInterfaceDefinition.mismatch`): the first mismatch, or nil.
func mismatch(
    _ value: JSONValue, _ type: VarlinkType, in interface: VarlinkInterfaceDefinition, path: String = "$"
) -> String? {
    interface.mismatch(value, type, path: path)
}

/// Checks an object against a field list, as `mismatch` does for structs.
func structMismatch(
    _ members: [String: JSONValue], _ fields: [VarlinkField], in interface: VarlinkInterfaceDefinition,
    path: String = "$"
) -> String? {
    interface.mismatch(members, fields, path: path)
}

/// SplitMix64: a small deterministic generator, so hostile random inputs are the same on every run.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var mixed = state
        mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
        mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
        return mixed ^ (mixed >> 31)
    }
}

/// The result of running a child process to completion.
struct ProcessResult {
    var status: Int32
    var standardOutput: String
    var standardError: String
}

/// Runs `python3 -c script` with `input` on stdin. The child bounds its own lifetime with `timeout 30`, and is
/// waited for here, so no process outlives the test.
func runPython(_ script: String, input: String) throws -> ProcessResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["timeout", "30", "python3", "-c", script]
    let stdin = Pipe()
    let stdout = Pipe()
    let stderr = Pipe()
    process.standardInput = stdin
    process.standardOutput = stdout
    process.standardError = stderr
    try process.run()
    // The inputs are a few KiB, below the pipe's capacity, so writing everything before reading cannot block.
    stdin.fileHandleForWriting.write(Data(input.utf8))
    try stdin.fileHandleForWriting.close()
    let output = stdout.fileHandleForReading.readDataToEndOfFile()
    let errors = stderr.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return ProcessResult(
        status: process.terminationStatus,
        standardOutput: String(decoding: output, as: UTF8.self),
        standardError: String(decoding: errors, as: UTF8.self)
    )
}
