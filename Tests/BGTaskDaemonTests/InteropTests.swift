// Python's varlink package as an independent client of the real daemon: introspection, streams, typed errors.

import BGTaskJSON
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Testing

@Suite("Varlink interoperability")
struct InteropTests {
    @Test("Python's varlink client: GetInfo, GetInterfaceDescription, Register (more), leases, typed errors")
    func pythonVarlinkClient() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            let script = try ChildProcess([
                "python3", Products.packageRoot + "/Tests/Fixtures/python_interop.py", daemon.socketPath,
            ])
            let line = try #require(try script.nextLine(timeout: .seconds(30)), "the script printed nothing")
            #expect(try script.waitForExit() == .exited(0))
            let seen = try JSONDecoder().decode([String: JSONValue].self, from: Data(line.utf8))

            #expect(seen["info"]?["product"] == "bgtaskd")
            #expect(seen["info"]?["interfaces"] == ["org.varlink.service", "io.bgtask.Lifecycle"])
            #expect(seen["description"]?.stringValue == LifecycleInterface.description)
            let members = Set(seen["parsedMembers"]?.arrayValue?.compactMap(\.stringValue) ?? [])
            #expect(members.isSuperset(of: LifecycleMethod.allCases.map(\.rawValue)))
            #expect(members.isSuperset(of: LifecycleErrorName.allCases.map(\.rawValue)))

            #expect(seen["registeredState"] == "active")
            #expect(seen["tasksWhileOpen"] == ["py-upload"])
            #expect(seen["tasksAfterEnd"] == 0)
            #expect(seen["eventAfterSetState"] == "willResignActive")
            let taskId = try #require(seen["taskId"]?.intValue)
            #expect(taskId > 0)

            #expect(seen["noSuchTask"]?["error"] == "io.bgtask.Lifecycle.NoSuchTask")
            #expect(seen["noSuchTask"]?["parameters"]?["taskId"]?.intValue == taskId)
            #expect(seen["noSuchApp"]?["error"] == "io.bgtask.Lifecycle.NoSuchApp")
            #expect(seen["methodNotFound"]?["error"] == "org.varlink.service.MethodNotFound")
            #expect(seen["methodNotFound"]?["parameters"]?["method"] == "io.bgtask.Lifecycle.NoSuchMethod")
            #expect(seen["invalidParameter"]?["error"] == "org.varlink.service.InvalidParameter")
            #expect(seen["invalidParameter"]?["parameters"]?["parameter"] == "app")
            #expect(seen["interfaceNotFound"]?["error"] == "org.varlink.service.InterfaceNotFound")
            #expect(daemon.isRunning)
        }
    }
}
