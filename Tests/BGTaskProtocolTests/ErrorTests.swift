// Tests of Varlink errors: every error of both interfaces encodes as declared and decodes back to its typed form.
import BGTaskIDL
import BGTaskProtocol
import Foundation
import Testing

private let codec = VarlinkCodec()

struct ErrorTests {
    static let lifecycleErrors: [LifecycleError] = [
        .noSuchApp(app: "org.example.mail"), .appExists(app: "org.example.mail"),
        .noSuchTask(app: "org.example.mail", taskId: 7), .backgroundTimeExhausted(app: "org.example.mail"),
        .permissionDenied, .invalidState(app: "org.example.mail", state: .terminated),
        .limitExceeded(limit: "TasksPerAppMax", max: 64), .noSuchEvent(app: "org.example.mail", eventId: 31),
        .invalidMessage(reason: "message is not valid JSON"),
        .launchFailed(app: "org.example.mail", reason: "no executable mail in PATH"),
        .noSuchRequest(app: "org.example.backup", identifier: "nightly"),
        .conditionUnavailable(conditions: [.unmeteredNetwork, .idle]),
    ]

    static let serviceErrors: [VarlinkServiceError] = [
        .interfaceNotFound(interface: "org.example.Other"), .methodNotFound(method: "io.bgtask.Lifecycle.Nope"),
        .methodNotImplemented(method: "io.bgtask.Lifecycle.Launch"), .invalidParameter(parameter: "taskId"),
        .permissionDenied, .expectedMore,
    ]

    @Test func everyLifecycleErrorIsCoveredOnce() {
        #expect(Set(ErrorTests.lifecycleErrors.map(\.errorName)) == Set(LifecycleErrorName.allCases))
        #expect(Set(ErrorTests.serviceErrors.map(\.errorName)) == Set(VarlinkServiceErrorName.allCases))
    }

    @Test(arguments: lifecycleErrors)
    func lifecycleErrorOnTheWire(_ error: LifecycleError) throws {
        let wire = VarlinkError(error)
        #expect(wire.name == "io.bgtask.Lifecycle." + error.errorName.rawValue)
        let declared = try #require(lifecycleDefinition.error(named: error.errorName.rawValue))
        try checkEncoding(wire, declared: declared, in: lifecycleDefinition)
        #expect(LifecycleError(wire) == error)
        #expect(VarlinkServiceError(wire) == nil)
    }

    @Test(arguments: serviceErrors)
    func serviceErrorOnTheWire(_ error: VarlinkServiceError) throws {
        let wire = VarlinkError(error)
        #expect(wire.name == "org.varlink.service." + error.errorName.rawValue)
        let declared = try #require(serviceDefinition.error(named: error.errorName.rawValue))
        try checkEncoding(wire, declared: declared, in: serviceDefinition)
        #expect(VarlinkServiceError(wire) == error)
        #expect(LifecycleError(wire) == nil)
    }

    private func checkEncoding(
        _ error: VarlinkError, declared: VarlinkErrorDefinition, in interface: VarlinkInterfaceDefinition
    ) throws {
        let framed = try codec.encodeError(error)
        let envelope = try #require(jsonValue(ofFramed: framed).objectValue)
        #expect(Set(envelope.keys) == ["error", "parameters"])
        #expect(envelope["error"] == .string(error.name))
        let parameters = try #require(envelope["parameters"]?.objectValue)
        #expect(structMismatch(parameters, declared.parameters, in: interface) == nil)
        // A client expecting any reply type gets the error instead.
        #expect(try codec.decodeReply(GetAppReply.self, from: unframed(framed)) == .error(error))
        #expect(throws: error) { try codec.decodeReply(GetAppReply.self, from: unframed(framed)).get() }
    }

    @Test func staticConstructorsBuildTheTypedErrors() {
        let rows: [(VarlinkError, VarlinkError)] = [
            (.noSuchApp(app: "a"), VarlinkError(LifecycleError.noSuchApp(app: "a"))),
            (.appExists(app: "a"), VarlinkError(LifecycleError.appExists(app: "a"))),
            (.noSuchTask(app: "a", taskId: 1), VarlinkError(LifecycleError.noSuchTask(app: "a", taskId: 1))),
            (.backgroundTimeExhausted(app: "a"), VarlinkError(LifecycleError.backgroundTimeExhausted(app: "a"))),
            (.permissionDenied(), VarlinkError(LifecycleError.permissionDenied)),
            (
                .invalidState(app: "a", state: .suspended),
                VarlinkError(LifecycleError.invalidState(app: "a", state: .suspended))
            ),
            (.limitExceeded(limit: "L", max: 2), VarlinkError(LifecycleError.limitExceeded(limit: "L", max: 2))),
            (.noSuchEvent(app: "a", eventId: 3), VarlinkError(LifecycleError.noSuchEvent(app: "a", eventId: 3))),
            (
                .interfaceNotFound(interface: "i.j"),
                VarlinkError(VarlinkServiceError.interfaceNotFound(interface: "i.j"))
            ),
            (.methodNotFound(method: "i.j.K"), VarlinkError(VarlinkServiceError.methodNotFound(method: "i.j.K"))),
            (
                .methodNotImplemented(method: "i.j.K"),
                VarlinkError(VarlinkServiceError.methodNotImplemented(method: "i.j.K"))
            ),
            (.invalidParameter(parameter: "p"), VarlinkError(VarlinkServiceError.invalidParameter(parameter: "p"))),
            (.servicePermissionDenied(), VarlinkError(VarlinkServiceError.permissionDenied)),
            (.expectedMore(), VarlinkError(VarlinkServiceError.expectedMore)),
        ]
        for (constructed, expected) in rows {
            #expect(constructed == expected)
        }
        #expect(
            VarlinkError.noSuchTask(app: "a", taskId: 7).description
                == #"io.bgtask.Lifecycle.NoSuchTask(app: "a", taskId: 7)"#)
    }

    @Test func typedErrorsRefuseForeignOrIllFormedErrors() {
        let rows: [VarlinkError] = [
            VarlinkError(name: "io.bgtask.Lifecycle.Unknown"),
            VarlinkError(name: "io.bgtask.Lifecycle.NoSuchApp"),
            VarlinkError(name: "io.bgtask.Lifecycle.NoSuchApp", parameters: ["app": 1]),
            VarlinkError(name: "io.bgtask.Lifecycle.NoSuchTask", parameters: ["app": "a", "taskId": 1.5]),
            VarlinkError(name: "io.bgtask.Lifecycle.InvalidState", parameters: ["app": "a", "state": "bogus"]),
            VarlinkError(name: "org.example.Other.NoSuchApp", parameters: ["app": "a"]),
            VarlinkError(name: "org.varlink.service.InvalidParameter"),
            VarlinkError(name: "NoSuchApp", parameters: ["app": "a"]),
        ]
        for error in rows {
            #expect(LifecycleError(error) == nil, "\(error)")
            #expect(VarlinkServiceError(error) == nil, "\(error)")
        }
    }
}
