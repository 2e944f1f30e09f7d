// The fixture app and the PhotoUploader example as real processes, against the scripted daemon.
import BGTaskClient
import BGTaskPOSIX
import BGTaskTestSupport
import Foundation
import Testing

@Suite struct AppProcessTests {
    @Test func fixtureRunsCommandsAndReportsEvents() async throws {
        try await offThePool {
            try withScriptedDaemon { daemon in
                try withChild(try fixtureCommand(socketPath: daemon.socketPath, lifetime: 30)) { app in
                    try app.waitForLine(startingWith: "ready pid=\(app.pid)")
                    #expect(try app.run("state", expecting: "state") == "state unregistered")
                    #expect(
                        try app.run("register mail", expecting: "registered").hasPrefix("registered mail state=active"))
                    #expect(
                        try app.run("register mail", expecting: "registered") == "error register: already registered")
                    #expect(try app.run("begin upload", expecting: "began") == "began 1")
                    #expect(
                        daemon.calls(BeginBackgroundTaskParameters.methodName).first?.parameters
                            == ["app": "mail", "name": "upload"])
                    #expect(try app.run("remaining", expecting: "remaining") == "remaining unlimited")
                    daemon.setRemainingSeconds(12.5)
                    #expect(try app.run("remaining", expecting: "remaining") == "remaining 12.5")

                    let entered = EventInfo(id: daemon.nextEventId(), kind: .didEnterBackground)
                    daemon.push(entered)
                    try app.waitForLine { $0 == "event didEnterBackground id=\(entered.id)" }
                    daemon.waitForAcknowledgement(of: entered.id)
                    #expect(try app.run("state", expecting: "state") == "state background")

                    let expiring = EventInfo(id: daemon.nextEventId(), kind: .backgroundTaskExpiring, taskIds: [1])
                    daemon.push(expiring)
                    try app.waitForLine { $0 == "event backgroundTaskExpiring id=\(expiring.id) tasks=1" }
                    try app.waitForLine { $0 == "expired 1" }
                    try app.waitForLine { $0 == "ended 1" }
                    #expect(daemon.calls(EndBackgroundTaskParameters.methodName).first?.parameters["taskId"] == 1)

                    let posted = EventInfo(
                        id: daemon.nextEventId(), kind: .notification, name: "sync",
                        payload: ["b": [1, 2], "a": "x/y"],
                        count: 2)
                    daemon.push(posted)
                    try app.waitForLine {
                        $0 == #"event notification id=\#(posted.id) name=sync payload={"a":"x/y","b":[1,2]} count=2"#
                    }
                    let warned = EventInfo(id: daemon.nextEventId(), kind: .memoryWarning, likelyVictim: true, rank: 1)
                    daemon.push(warned)
                    try app.waitForLine { $0 == "event memoryWarning id=\(warned.id) victim=1" }
                    let safe = EventInfo(id: daemon.nextEventId(), kind: .memoryWarning, likelyVictim: false)
                    daemon.push(safe)
                    try app.waitForLine { $0 == "event memoryWarning id=\(safe.id) victim=safe" }
                    daemon.waitForAcknowledgement(of: safe.id)

                    // Withheld acknowledgements: none is sent until asked, and `never` refuses to ask.
                    #expect(try app.run("ack never", expecting: "ack") == "ack never")
                    let withheld = EventInfo(id: daemon.nextEventId(), kind: .willEnterForeground)
                    daemon.push(withheld)
                    try app.waitForLine { $0 == "event willEnterForeground id=\(withheld.id)" }
                    #expect(try app.run("ack \(withheld.id)", expecting: "acked").hasPrefix("error ack:"))
                    #expect(try app.run("ack manual", expecting: "ack") == "ack manual")
                    #expect(try app.run("ack \(withheld.id)", expecting: "acked") == "acked \(withheld.id)")
                    let acknowledgements = daemon.calls(AcknowledgeParameters.methodName).filter {
                        $0.parameters["eventId"] == .number(Double(withheld.id))
                    }
                    #expect(acknowledgements.count == 1, "acknowledged only when asked")

                    #expect(try app.run("end 1", expecting: "ended") == "error end: no open task 1")
                    #expect(try app.run("begin", expecting: "began") == "began 2")
                    #expect(try app.run("end 2", expecting: "ended") == "ended 2")
                    #expect(try app.run("alloc 4", expecting: "allocated") == "allocated 4 total=4")
                    let lockPath = daemon.directory + "/lock"
                    #expect(try app.run("lock \(lockPath)", expecting: "locked") == "locked \(lockPath)")
                    #expect(try app.run("unlock", expecting: "unlocked") == "unlocked")
                    #expect(try app.run("bogus", expecting: "") == "error unknown command bogus")
                    try app.send("exit 7")
                    #expect(try app.waitForExit() == .exited(7))
                }
            }
        }
    }

    @Test func fixtureExitsOnWillTerminateAndWhenStdinCloses() async throws {
        try await offThePool {
            try withScriptedDaemon { daemon in
                try withChild(try fixtureCommand(socketPath: daemon.socketPath, lifetime: 30)) { app in
                    try app.waitForLine(startingWith: "ready")
                    try app.run("register mail background exits-on-suspend", expecting: "registered")
                    #expect(
                        daemon.calls(RegisterParameters.methodName).first?.parameters
                            == ["name": "mail", "state": "background", "exitsOnSuspend": true])
                    let terminate = EventInfo(id: daemon.nextEventId(), kind: .willTerminate)
                    daemon.push(terminate)
                    try app.waitForLine { $0 == "event willTerminate id=\(terminate.id)" }
                    #expect(try app.waitForExit() == .exited(0))
                }
                try withChild(try fixtureCommand(socketPath: daemon.socketPath, lifetime: 30)) { app in
                    try app.waitForLine(startingWith: "ready")
                    app.closeInput()
                    try app.waitForLine { $0 == "exiting stdin closed" }
                    #expect(try app.waitForExit() == .exited(0))
                }
            }
        }
    }

    @Test func fixtureBoundsItsOwnLifetime() async throws {
        try await offThePool {
            try withScriptedDaemon { daemon in
                try withChild(try fixtureCommand(socketPath: daemon.socketPath, lifetime: 1)) { app in
                    try app.waitForLine(startingWith: "ready")
                    try app.waitForLine(startingWith: "error lifetime")
                    #expect(try app.waitForExit() == .exited(3))
                }
            }
        }
    }

    @Test func photoUploaderFinishesInBackgroundUnderItsTask() async throws {
        try await offThePool {
            try withScriptedDaemon { daemon in
                let command = try photoUploaderCommand(socketPath: daemon.socketPath, photos: 6, chunkMilliseconds: 100)
                try withChild(command) { app in
                    try app.waitForLine(startingWith: "registered as photo-uploader, state active")
                    try app.waitForLine(startingWith: "upload started: 6 photos, background task 1")
                    try app.waitForLine(
                        startingWith: "uploaded photo 1/6, state active, backgroundTimeRemaining unlimited")
                    daemon.setRemainingSeconds(30)
                    let resign = EventInfo(id: daemon.nextEventId(), kind: .willResignActive)
                    let entered = EventInfo(id: daemon.nextEventId(), kind: .didEnterBackground)
                    daemon.push(resign)
                    daemon.push(entered)
                    try app.waitForLine { $0 == "entered background, 30 s of background time left" }
                    try app.waitForLine { $0.hasSuffix("state background, backgroundTimeRemaining 30 s") }
                    try app.waitForLine { $0 == "upload finished" }
                    try app.waitForLine { $0 == "ended background task 1" }
                    try app.waitForLine { $0 == "done" }
                    #expect(try app.waitForExit() == .exited(0))

                    let log = daemon.log
                    let begin = log.first { $0.isCall(BeginBackgroundTaskParameters.methodName, "name", "upload") }
                    let acknowledged = log.first {
                        $0.isCall(AcknowledgeParameters.methodName, "eventId", .number(Double(entered.id)))
                    }
                    let end = log.first { $0.isCall(EndBackgroundTaskParameters.methodName, "taskId", 1) }
                    #expect(begin != nil && acknowledged != nil && end != nil, "\(log)")
                    if let begin, let acknowledged, let end {
                        #expect(
                            begin.sequence < acknowledged.sequence && acknowledged.sequence < end.sequence,
                            "the lease spans the move to background")
                    }
                }
            }
        }
    }

    @Test func photoUploaderCancelsWhenTimeRunsOut() async throws {
        try await offThePool {
            try withScriptedDaemon { daemon in
                let command = try photoUploaderCommand(
                    socketPath: daemon.socketPath, photos: 1000, chunkMilliseconds: 50)
                try withChild(command) { app in
                    try app.waitForLine(startingWith: "upload started")
                    daemon.push(EventInfo(id: daemon.nextEventId(), kind: .didEnterBackground))
                    try app.waitForLine(startingWith: "entered background")
                    daemon.push(EventInfo(id: daemon.nextEventId(), kind: .backgroundTaskExpiring, taskIds: [1]))
                    try app.waitForLine { $0 == "background time is running out: cancelling the upload" }
                    // The handler ends the task and the process; the upload thread may notice the cancellation
                    // first (and say so) or not before the exit.
                    try app.waitForLine { $0 == "ended background task 1" }
                    try app.waitForLine { $0 == "done" }
                    #expect(try app.waitForExit() == .exited(0))
                    #expect(!app.transcript.contains("upload finished"))
                    #expect(daemon.calls(EndBackgroundTaskParameters.methodName).count == 1)
                }
            }
        }
    }

    @Test func photoUploaderExitsOnWillTerminate() async throws {
        try await offThePool {
            try withScriptedDaemon { daemon in
                let command = try photoUploaderCommand(
                    socketPath: daemon.socketPath, photos: 1000, chunkMilliseconds: 50)
                try withChild(command) { app in
                    try app.waitForLine(startingWith: "upload started")
                    daemon.push(EventInfo(id: daemon.nextEventId(), kind: .willTerminate))
                    try app.waitForLine { $0 == "terminating: cancelling the upload" }
                    #expect(try app.waitForExit() == .exited(0))
                }
            }
        }
    }
}
