// Varlink behaviour any client relies on: replies in call order, oneway calls, more on non-streaming methods.

import BGTaskDaemon
import BGTaskJSON
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Testing

@Suite("Varlink conformance")
struct VarlinkConformanceTests {
    @Test("calls sent back to back in one write are answered in order")
    func pipelinedCallsAreAnsweredInOrder() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            let app = try pythonApp(daemon, name: "ordered")
            let client = try daemon.connect()
            var bytes: [UInt8] = []
            for method in ["GetApp", "BeginBackgroundTask", "BeginBackgroundTask", "GetStatus"] {
                let call = JSONValue.object([
                    "method": .string("io.bgtask.Lifecycle." + method),
                    "parameters": method == "GetStatus" ? .object([:]) : .object(["app": "ordered"]),
                ])
                bytes += Array(try JSONEncoder().encode(call)) + [0]
            }
            try client.sendRaw(bytes)
            let replies = try (0..<4).map { _ in try #require(try client.receive()) }
            #expect(replies[0].parameters["app"]?["name"] == "ordered")
            let first = try #require(replies[1].parameters["taskId"]?.intValue)
            #expect(replies[2].parameters["taskId"]?.intValue == first + 1)
            #expect(replies[3].parameters["tasks"] == .number(2))
            _ = app
        }
    }

    @Test("a oneway call gets no reply, and still takes effect")
    func onewayCall() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            let app = try pythonApp(daemon, name: "quiet")
            let client = try daemon.connect()
            try client.send("io.bgtask.Lifecycle.SetState", ["app": "quiet", "state": "inactive"], oneway: true)
            try app.waitForLine(startingWith: "event willResignActive")
            // The next reply on the connection is the next call's: nothing was sent for the oneway one.
            let status = try client.call("io.bgtask.Lifecycle.GetApp", ["app": "quiet"])
            #expect(status.parameters["app"]?["state"] == "inactive")
            // A oneway call that fails is not answered either.
            try client.send("io.bgtask.Lifecycle.Terminate", ["app": "nobody"], oneway: true)
            let after = try client.call("org.varlink.service.GetInfo")
            #expect(after.errorName == nil)
        }
    }

    @Test("more on a method that does not stream: one reply, without continues")
    func moreOnASingleReplyMethod() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            let client = try daemon.connect()
            let reply = try client.call("io.bgtask.Lifecycle.GetStatus", more: true)
            #expect(reply["continues"] == nil || reply["continues"] == false)
            #expect(reply.parameters["version"] == .string(Manager.version))
            #expect(try client.call("org.varlink.service.GetInfo").errorName == nil)
        }
    }

    @Test("socket paths: --socket, then RUNTIME_DIRECTORY, then /run/bgtaskd; --user under XDG_RUNTIME_DIR")
    func socketPaths() async throws {
        try await offThePool {
            let file = LifecycleInterface.name
            let system = try DaemonOptions.parse([])
            #expect(try system.resolvedSocketPath(environment: [:]) == "/run/bgtaskd/\(file)")
            #expect(
                try system.resolvedSocketPath(environment: ["RUNTIME_DIRECTORY": "/run/x:/run/y"]) == "/run/x/\(file)")
            let explicit = try DaemonOptions.parse(["--socket", "/tmp/s"])
            #expect(try explicit.resolvedSocketPath(environment: ["RUNTIME_DIRECTORY": "/run/x"]) == "/tmp/s")
            let user = try DaemonOptions.parse(["--user"])
            #expect(
                try user.resolvedSocketPath(environment: ["XDG_RUNTIME_DIR": "/run/user/1000"])
                    == "/run/user/1000/bgtaskd/\(file)")
            #expect(throws: DaemonOptions.ResolutionError.self) { try user.resolvedSocketPath(environment: [:]) }
            #expect(
                user.resolvedConfigurationPath(environment: ["HOME": "/home/a"])
                    == "/home/a/.config/bgtaskd/bgtaskd.conf")
            #expect(system.resolvedConfigurationPath(environment: [:]) == "/etc/bgtaskd/bgtaskd.conf")
        }
    }
}
