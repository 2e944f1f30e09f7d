// Authorization from peer credentials, with calls made by real processes running as other users.

import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Testing

/// Runs the package's executables as another user: copies them where any user may run them (the build
/// directory may sit under a home only root can enter) and starts them through `setpriv`.
struct OtherUser {
    let uid: UInt32
    let gid: UInt32
    var groups: [UInt32] = []
    let tools: ScratchDirectory

    init(uid: UInt32, gid: UInt32, groups: [UInt32] = []) throws {
        self.uid = uid
        self.gid = gid
        self.groups = groups
        tools = try ScratchDirectory(prefix: "bgtask-tools")
        for name in ["BGTaskRawCall", "BGTaskFixtureApp"] {
            try Products.copy(name, into: tools.path)
        }
    }

    var setpriv: [String] {
        let groupList = groups.isEmpty ? "--clear-groups" : "--groups=" + groups.map(String.init).joined(separator: ",")
        return ["setpriv", "--reuid=\(uid)", "--regid=\(gid)", groupList]
    }

    /// Makes one call as this user; returns the reply object (the first one, with `more`).
    func call(
        _ daemon: DaemonHarness, _ method: String, _ parameters: [String: JSONValue] = [:], more: Bool = false
    ) throws -> [String: JSONValue] {
        var object: [String: JSONValue] = [
            "method": .string("io.bgtask.Lifecycle." + method), "parameters": .object(parameters),
        ]
        if more { object["more"] = true }
        let call = try JSONEncoder().encode(JSONValue.object(object))
        let process = try ChildProcess(
            setpriv + [tools.path + "/BGTaskRawCall", daemon.socketPath, String(decoding: call, as: UTF8.self)])
        let line = try #require(try process.nextLine(), "no reply printed")
        #expect(try process.waitForExit() == .exited(0))
        guard case .object(let reply) = try JSONDecoder().decode(JSONValue.self, from: Data(line.utf8)) else {
            throw HarnessError("not a reply: \(line)")
        }
        return reply
    }

    /// The Swift fixture app, running as this user.
    func app(_ daemon: DaemonHarness) throws -> ChildProcess {
        let app = try ChildProcess(
            setpriv + [tools.path + "/BGTaskFixtureApp", "--socket", daemon.socketPath, "--lifetime", "60"])
        try app.waitForLine(startingWith: "ready")
        return app
    }
}

@Suite("Permissions")
struct PermissionTests {
    static let nobody: UInt32 = 65534

    @Test("another uid cannot end, begin, move, terminate or read a root app's leases and state")
    func otherUserIsDenied() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            let app = try pythonApp(daemon, name: "rootapp")
            try app.send("begin secret")
            let task = try number(after: "began", in: try app.waitForLine(startingWith: "began"))
            let nobody = try OtherUser(uid: Self.nobody, gid: Self.nobody)
            let denied = "io.bgtask.Lifecycle.PermissionDenied"
            #expect(
                try nobody.call(daemon, "EndBackgroundTask", ["app": "rootapp", "taskId": .number(Double(task))])
                    .errorName == denied)
            #expect(try nobody.call(daemon, "BeginBackgroundTask", ["app": "rootapp"]).errorName == denied)
            #expect(try nobody.call(daemon, "SetState", ["app": "rootapp", "state": "background"]).errorName == denied)
            #expect(try nobody.call(daemon, "Terminate", ["app": "rootapp"]).errorName == denied)
            #expect(try nobody.call(daemon, "GetApp", ["app": "rootapp"]).errorName == denied)
            #expect(try nobody.call(daemon, "Acknowledge", ["app": "rootapp", "eventId": 1]).errorName == denied)
            #expect(try nobody.call(daemon, "ListApps").parameters["apps"] == .array([]))
            #expect(try nobody.call(daemon, "History").parameters["entries"] == .array([]))
            // Broadcasting reaches only the caller's own apps: none.
            let post = try nobody.call(daemon, "Post", ["name": "spam"])
            #expect(post.parameters["delivered"] == .number(0))

            // Nothing changed.
            let control = try daemon.connect()
            let state = try control.app("rootapp")
            #expect(state["state"] == "active")
            #expect(state["tasks"]?.arrayValue?.count == 1)
            #expect(daemon.log.contains("denied EndBackgroundTask on rootapp to uid 65534"))
        }
    }

    @Test("an app's own uid controls its own apps; root controls every app")
    func ownerAndRoot() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            let nobody = try OtherUser(uid: Self.nobody, gid: Self.nobody)
            let app = try nobody.app(daemon)
            try app.send("register nobodyapp")
            try app.waitForLine(startingWith: "registered nobodyapp")
            try app.send("begin chore")
            let task = try number(after: "began", in: try app.waitForLine(startingWith: "began"))
            let control = try daemon.connect()
            #expect(try control.app("nobodyapp")["uid"] == .number(Double(Self.nobody)))

            #expect(try nobody.call(daemon, "GetApp", ["app": "nobodyapp"]).errorName == nil)
            let listed = try nobody.call(daemon, "ListApps").parameters["apps"]?.arrayValue ?? []
            #expect(listed.map { $0["name"] } == ["nobodyapp"])
            let moved = try nobody.call(daemon, "SetState", ["app": "nobodyapp", "state": "inactive"])
            #expect(moved.parameters["app"]?["state"] == "inactive")
            try app.waitForLine(startingWith: "event willResignActive")
            // Root may end another uid's lease.
            let ended = try control.lifecycle(
                "EndBackgroundTask", ["app": "nobodyapp", "taskId": .number(Double(task))])
            #expect(ended.errorName == nil)
            #expect(try control.app("nobodyapp")["tasks"] == .array([]))
        }
    }

    @Test("members of ControllerGroup control other users' apps; non-members do not")
    func controllerGroup() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(
                configuration: DaemonHarness.fastPolicy + "\n[Access]\nControllerGroup=4242\n")
            let app = try pythonApp(daemon, name: "rootapp")
            defer { app.terminate() }
            let member = try OtherUser(uid: 4243, gid: 4243, groups: [4242])
            let outsider = try OtherUser(uid: 4244, gid: 4244, groups: [4343])
            #expect(
                try outsider.call(daemon, "SetState", ["app": "rootapp", "state": "inactive"]).errorName
                    == "io.bgtask.Lifecycle.PermissionDenied")
            let moved = try member.call(daemon, "SetState", ["app": "rootapp", "state": "inactive"])
            #expect(moved.parameters["app"]?["state"] == "inactive", "\(moved)")
            #expect(try member.call(daemon, "ListApps").parameters["apps"]?.arrayValue?.count == 1)
            // App calls stay with the app's own uid and root, even for controllers.
            #expect(
                try member.call(daemon, "BeginBackgroundTask", ["app": "rootapp"]).errorName
                    == "io.bgtask.Lifecycle.PermissionDenied")
        }
    }

    @Test("scheduled requests belong to a user: others cannot submit for, see or cancel them, nor run them")
    func scheduledRequestsBelongToAUser() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            let app = try pythonApp(daemon, name: "rootapp")
            defer { app.terminate() }
            let control = try daemon.connect()
            let tomorrow = JSONValue.number(Date().timeIntervalSince1970 + 86_400)
            let later = try control.lifecycle(
                "SubmitRequest", ["app": "rootapp", "identifier": "later", "earliestBegin": tomorrow])
            #expect(later.parameters["request"]?["uid"] == 0, "\(later)")
            let nobody = try OtherUser(uid: Self.nobody, gid: Self.nobody)
            #expect(
                try nobody.call(daemon, "SubmitRequest", ["app": "rootapp", "identifier": "mine"]).errorName
                    == "io.bgtask.Lifecycle.PermissionDenied")
            // Another user's request is not there for it: not listed, and cancelling it finds nothing.
            #expect(
                try nobody.call(daemon, "CancelRequest", ["app": "rootapp", "identifier": "later"]).errorName
                    == "io.bgtask.Lifecycle.NoSuchRequest")
            #expect(try nobody.call(daemon, "ListRequests").parameters["requests"] == [])

            // A name no live app holds and apps.d does not pin: the request is its submitter's, and the name's
            // requests stay with that user.
            let own = try nobody.call(daemon, "SubmitRequest", ["app": "shared", "identifier": "sync"])
            #expect(own.parameters["request"]?["uid"] == .number(Double(Self.nobody)), "\(own)")
            let stranger = try OtherUser(uid: 4245, gid: 4245)
            #expect(
                try stranger.call(daemon, "SubmitRequest", ["app": "shared", "identifier": "other"]).errorName
                    == "io.bgtask.Lifecycle.PermissionDenied")
            #expect(try nobody.call(daemon, "ListRequests").parameters["requests"]?.arrayValue?.count == 1)
            #expect(try control.lifecycle("ListRequests").parameters["requests"]?.arrayValue?.count == 2)

            // Due now and needing nothing, it does not run in a registration of the name by another user: the
            // registration plans the requests again before its reply, so a run would show at once.
            let impostor = try pythonApp(daemon, name: "shared")
            defer { impostor.terminate() }
            let listed = try control.lifecycle("ListRequests", ["app": "shared"]).parameters["requests"]
            #expect(listed?.arrayValue?.first?["state"] == "pending", "\(String(describing: listed))")
            #expect(!impostor.transcript.contains { $0.hasPrefix("event runScheduledTask") })

            #expect(try nobody.call(daemon, "CancelRequest", ["app": "shared", "identifier": "sync"]).errorName == nil)
            #expect(try nobody.call(daemon, "ListRequests").parameters["requests"] == [])
        }
    }
}
