// The interface file against the running daemon: every method the file declares is served, every reply has
// exactly the declared fields with the declared types, and every error the daemon answers with is declared, with
// the declared fields. The Swift types are generated from the same file; this checks what the daemon sends.

import BGTaskIDL
import BGTaskJSON
import BGTaskProtocol
import BGTaskTestSupport
import Testing

@Suite("the interface file and the daemon agree")
struct InterfaceAgreementTests {
    /// A value of `type` for a required parameter named `name` of `method`, aimed at the app `app`.
    private func sample(_ type: VarlinkType, name: String, method: String, app: String) -> JSONValue {
        switch type {
        case .bool: return false
        case .int: return 999_999
        case .float: return 30
        case .object: return .object([:])
        case .array: return .array(["true"])
        case .string:
            switch (method, name) {
            case ("SetState", "state"): return "background"
            case ("Register", "name"): return "agreement-self"
            case ("Launch", "name"): return "agreement-launched"
            case ("Post", "name"): return "ping"
            default: return .string(app)
            }
        default: return .null
        }
    }

    /// The first problem with `reply` to `method`: an error the interfaces do not declare (or one that says the
    /// daemon does not serve the method or did not take its declared parameters), or parameters unlike the
    /// declared ones.
    private func problem(
        with reply: [String: JSONValue], to method: VarlinkMethodDefinition, lifecycle: VarlinkInterfaceDefinition,
        service: VarlinkInterfaceDefinition
    ) -> String? {
        guard let error = reply.errorName else {
            return lifecycle.mismatch(reply.parameters, method.reply).map { "\(method.name) reply: \($0)" }
        }
        let refusals = ["MethodNotFound", "MethodNotImplemented", "InvalidParameter"].map {
            VarlinkServiceInterface.name + "." + $0
        }
        if refusals.contains(error) { return "\(method.name) answered \(error) \(reply.parameters)" }
        for interface in [lifecycle, service] where error.hasPrefix(interface.name + ".") {
            guard let declared = interface.error(named: String(error.dropFirst(interface.name.count + 1))) else {
                return "\(method.name) answered \(error), which \(interface.name) does not declare"
            }
            return interface.mismatch(reply.parameters, declared.parameters).map { "\(error): \($0)" }
        }
        return "\(method.name) answered \(error), of no interface the daemon serves"
    }

    @Test("every declared method is served, with the declared reply or a declared error")
    func everyMethodAnswersAsDeclared() async throws {
        try await offThePool {
            let lifecycle = try VarlinkInterfaceDefinition(parsing: LifecycleInterface.description)
            let service = try VarlinkInterfaceDefinition(parsing: VarlinkServiceInterface.description)
            let daemon = try DaemonHarness()
            let app = try pythonApp(daemon, name: "agreement")
            defer { app.terminate() }
            // Watch answers only when an entry is recorded: opened first, read once the calls below made some.
            let watch = try daemon.connect()
            try watch.send(LifecycleInterface.name + ".Watch", more: true)
            var served: [String] = []
            for method in lifecycle.methods where method.name != "Watch" {
                var parameters: [String: JSONValue] = [:]
                for field in method.parameters {
                    if case .optional = field.type { continue }
                    parameters[field.name] = sample(field.type, name: field.name, method: method.name, app: "agreement")
                }
                // Register registers the calling process: this test's, on a connection closed right after, which
                // ends the registration without touching the process.
                let client = try daemon.connect()
                defer { client.close() }
                let reply = try client.call(
                    LifecycleInterface.name + "." + method.name, parameters, more: method.name == "Register")
                #expect(problem(with: reply, to: method, lifecycle: lifecycle, service: service) == nil, "\(reply)")
                if reply.errorName == nil { served.append(method.name) }
            }
            let entry = try #require(try watch.receive())
            let watchMethod = try #require(lifecycle.method(named: "Watch"))
            #expect(problem(with: entry, to: watchMethod, lifecycle: lifecycle, service: service) == nil, "\(entry)")
            // Every one answered with a reply, not an error, so the check above saw its fields; but Watch, read
            // below, and EndBackgroundTask, Acknowledge and SetTaskCompleted, which name ids the samples cannot know.
            let unknowable: Set = ["Watch", "EndBackgroundTask", "Acknowledge", "SetTaskCompleted"]
            #expect(Set(served) == Set(lifecycle.methods.map(\.name)).subtracting(unknowable), "served: \(served)")
            // And nothing but what the file declares: a method it does not name is not found.
            let unknown = try daemon.connect().call(LifecycleInterface.name + ".Unregister", [:])
            #expect(unknown.errorName == "org.varlink.service.MethodNotFound")
            try daemon.stop()
        }
    }
}
