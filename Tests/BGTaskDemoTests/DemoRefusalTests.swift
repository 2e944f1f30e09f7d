// `bgtask demo` refusing to start: what it says, its exit status, and that it started nothing and left nothing.
import BGTaskPOSIX
import BGTaskTestSupport
import Foundation
import Testing

@Suite("bgtask demo refusals")
struct DemoRefusalTests {
    @Test("without bgtaskd and bgtask-demo-app beside bgtask, fails with one line saying what to do")
    func missingProducts() async throws {
        try await offThePool {
            let tools = try ScratchDirectory(prefix: "bgtask-demo-alone")
            try Products.copy("bgtask", into: tools.path)
            let run = try DemoRun(bgtask: tools.path + "/bgtask")
            let (status, _) = try run.finish(timeout: .seconds(30))
            #expect(status == .exited(1))
            let lines = run.errors.split(separator: "\n")
            #expect(lines.count == 1, "\(run.errors)")
            #expect(run.errors.contains("no executable \(tools.path)/bgtaskd"), "\(run.errors)")
            #expect(run.errors.contains("swift build"), "\(run.errors)")
            #expect(run.lines.isEmpty, "\(run.transcript)")
            #expect(run.temporaryLeftovers().isEmpty)
        }
    }

    @Test(
        "a background time the scenes cannot fit is refused before anything starts",
        arguments: ["2s", "2999ms", "11min"])
    func backgroundTimeOutOfRange(_ duration: String) async throws {
        try await offThePool {
            let run = try DemoRun(bgtask: try Products.path("bgtask"), arguments: ["--background-time", duration])
            let (status, _) = try run.finish(timeout: .seconds(30))
            #expect(status == .exited(1), "\(run.errors)")
            #expect(run.errors.contains("--background-time must be between 3s and 10m"), "\(run.errors)")
            #expect(run.lines.isEmpty && run.temporaryLeftovers().isEmpty)
        }
    }
}
