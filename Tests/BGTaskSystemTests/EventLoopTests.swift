// The sd-event loop with real timers, descriptors and signals; handlers that cancel and re-arm themselves.
import BGTaskPOSIX
import BGTaskSystem
import Glibc
import Testing

/// Runs `loop` with a safety timer: if the test's own exit never comes, the loop stops after `limit`
/// and the test fails instead of hanging.
private func run(_ loop: EventLoop, limit: Duration = .seconds(20)) throws -> Int32 {
    let deadline = loop.now + limit.components.seconds * 1_000_000_000
    let guardTimer = try loop.addTimer(at: deadline, name: "test-limit") { _ in
        Issue.record("event loop test hit its time limit")
        try? loop.exit(code: -1)
    }
    defer { guardTimer.cancel() }
    return try loop.run()
}

@Suite struct EventLoopTests {
    @Test func timersFireInDeadlineOrderNeverEarly() throws {
        let loop = try EventLoop()
        var fired: [Int] = []
        var early: [Int] = []
        try loop.addDefer {
            let base = loop.now
            // Added out of order, 50 ms apart so scheduling noise cannot make two due in one iteration.
            for index in [3, 1, 2] {
                let deadline = base + Int64(index) * 50_000_000
                do {
                    try loop.addTimer(at: deadline, accuracy: .microseconds(1), name: "t\(index)") { timer in
                        fired.append(index)
                        if MonotonicClock.now() < timer.deadline { early.append(index) }
                        timer.cancel()
                        if fired.count == 3 { try? loop.exit(code: 0) }
                    }
                } catch {
                    Issue.record(error)
                }
            }
        }
        #expect(try run(loop) == 0)
        #expect(fired == [1, 2, 3])
        #expect(early.isEmpty)
        #expect(loop.sourceCount == 0)
    }

    @Test func idleWorkRunsOnceEverythingReadyIsServedAndMaySchedule() throws {
        let loop = try EventLoop()
        var log: [String] = []
        var idleTurns = 0
        let (reader, writer) = try FileDescriptor.pipe()
        defer {
            try? reader.close()
            try? writer.close()
        }
        loop.afterDispatch = { log.append("after(\(loop.isDispatching))") }
        loop.whenIdle = {
            idleTurns += 1
            log.append("idle(\(loop.isDispatching))")
            // Added while the loop is about to sleep, with nothing else to wake it: it must run all the same (a
            // loop that slept past it would end at the test's time limit, which records a failure).
            try? loop.addDefer {
                log.append("exit")
                try? loop.exit(code: 7)
            }
        }
        try loop.addIO(fd: reader, events: .readable, name: "pipe") { source, _ in
            log.append("read(\(loop.isDispatching))")
            _ = try? reader.read(upTo: 16)
            source.cancel()
        }
        try loop.addDefer { log.append("first(\(loop.isDispatching))") }
        try loop.addDefer { log.append("second(\(loop.isDispatching))") }
        try writer.writeAll([1])
        #expect(try run(loop) == 7)
        #expect(idleTurns == 1, "\(log)")
        // The three ready handlers (in sd-event's order), each followed by afterDispatch, then the idle work once,
        // then what it added.
        let served = log.prefix(6)
        #expect(
            Set(served.enumerated().filter { $0.offset % 2 == 0 }.map(\.element))
                == ["first(true)", "second(true)", "read(true)"], "\(log)")
        #expect(served.enumerated().filter { $0.offset % 2 == 1 }.allSatisfy { $0.element == "after(false)" })
        #expect(Array(log.dropFirst(6).prefix(3)) == ["idle(false)", "exit", "after(false)"], "\(log)")
        #expect(!loop.isDispatching)

        // Stepping a loop by hand runs the hooks too; a step whose idle work scheduled something dispatches it.
        let stepped = try EventLoop()
        var afterCount = 0
        var steppedIdle = 0
        var ranScheduled = false
        stepped.afterDispatch = { afterCount += 1 }
        stepped.whenIdle = {
            steppedIdle += 1
            if steppedIdle == 1 { try? stepped.addDefer { ranScheduled = true } }
        }
        try stepped.addDefer {}
        #expect(try stepped.runIteration(timeout: .seconds(10)))
        #expect(afterCount == 1 && steppedIdle == 0)
        #expect(try stepped.runIteration(timeout: .seconds(10)))
        #expect(ranScheduled && afterCount == 2 && steppedIdle == 1)
        #expect(try !stepped.runIteration(timeout: .milliseconds(1)))
        #expect(afterCount == 2 && steppedIdle == 2)
    }

    @Test func oneTimerReArmedFromItsOwnHandlerAndFromOutside() throws {
        let loop = try EventLoop()
        var firings = 0
        let timer = try loop.addTimer(at: loop.now + 1_000_000, name: "policy") { timer in
            firings += 1
            #expect((try? timer.isEnabled) == false)  // One-shot: disabled once it fired.
            if firings < 3 {
                try? timer.rearm(at: loop.now + 1_000_000)
            } else {
                try? loop.exit(code: Int32(firings))
            }
        }
        #expect(try run(loop) == 3)
        #expect(firings == 3)

        // A disabled timer does not fire; re-arming from outside brings it back.
        let second = try EventLoop()
        var order: [String] = []
        let quiet = try second.addTimer(at: second.now + 1_000_000, name: "quiet") { _ in order.append("quiet") }
        try quiet.setEnabled(false)
        try second.addTimer(at: second.now + 20_000_000, name: "rearmer") { _ in
            order.append("rearmer")
            try? quiet.rearm(at: second.now)
        }
        try second.addPost(name: "stop-when-quiet-fired") { _ in
            if order.last == "quiet" { try? second.exit(code: 0) }
        }
        #expect(try run(second) == 0)
        #expect(order == ["rearmer", "quiet"])
        // The handlers capture their loops: cancelling the sources breaks the cycles.
        #expect(loop.sourceCount == 1 && !timer.isCancelled)
        loop.cancelAllSources()
        second.cancelAllSources()
        #expect(loop.sourceCount == 0 && timer.isCancelled)
    }

    @Test func ioReadinessAndTogglingWritable() throws {
        let loop = try EventLoop()
        let (readEnd, writeEnd) = try FileDescriptor.pipe()
        defer {
            try? readEnd.close()
            try? writeEnd.close()
        }
        var received: [UInt8] = []
        try loop.addIO(fd: readEnd, events: .readable, name: "pipe") { source, events in
            #expect(events.contains(.readable))
            received += (try? source.fileDescriptor.read(upTo: 64)) ?? []
            source.cancel()
            try? loop.exit(code: 0)
        }
        try loop.addDefer { try? writeEnd.writeAll(Array("wake".utf8)) }
        #expect(try run(loop) == 0)
        #expect(received == Array("wake".utf8))

        // An output buffer filled: watch for writable only while there is something to flush. A loop runs
        // once (sd-event refuses new sources after exit), so this part gets its own.
        let loop2 = try EventLoop()
        let (near, far) = try UnixSocket.pair()
        defer {
            try? near.close()
            try? far.close()
        }
        try near.setNonBlocking()
        var seen: [IOEvents] = []
        let connection = try loop2.addIO(fd: near, events: .readable, name: "connection") { source, events in
            seen.append(events)
            try? source.setEvents(.readable)
            try? loop2.exit(code: 0)
        }
        #expect(try connection.events == .readable)
        try loop2.addDefer { try? connection.setEvents([.readable, .writable]) }
        #expect(try run(loop2) == 0)
        #expect(seen == [.writable])
        #expect(try connection.events == .readable)
        connection.cancel()
    }

    @Test func signalSourceReceivesARaisedSignal() throws {
        let wasBlocked = try Signal.isBlocked(.user2)
        defer { if !wasBlocked { try? Signal.unblock([.user2]) } }
        let loop = try EventLoop()
        var infos: [SignalInfo] = []
        let source = try loop.addSignal(.user2) { source, info in
            infos.append(info)
            source.cancel()
            try? loop.exit(code: 0)
        }
        #expect(source.name == "SIGUSR2")
        #expect(try Signal.isBlocked(.user2))
        // raise() targets this thread, which runs the loop and blocks the signal: it waits for the signalfd.
        try loop.addDefer { raise(SIGUSR2) }
        #expect(try run(loop) == 0)
        #expect(infos == [SignalInfo(signal: .user2, senderPID: getpid(), senderUID: getuid())])
    }

    @Test func deferRunsOncePostRunsAfterDispatchesExitRunsAtExit() throws {
        let loop = try EventLoop()
        var log: [String] = []
        try loop.addDefer(name: "first") { log.append("defer") }
        let cancelled = try loop.addDefer(name: "never") { log.append("cancelled defer ran") }
        cancelled.cancel()
        try loop.addPost { post in
            log.append("post")
            post.cancel()
        }
        try loop.addTimer(at: loop.now + 2_000_000) { _ in
            log.append("timer")
            try? loop.exit(code: 5)
        }
        try loop.addExit { _ in log.append("exit") }
        #expect(try run(loop) == 5)
        #expect(log == ["defer", "post", "timer", "exit"])
        loop.cancelAllSources()
    }

    @Test func cancelFromInsideItsOwnCallbackReleasesTheSource() throws {
        let loop = try EventLoop()
        let (readEnd, writeEnd) = try FileDescriptor.pipe()
        defer {
            try? readEnd.close()
            try? writeEnd.close()
        }
        try writeEnd.writeAll([1])  // Never read: level-triggered, it would fire every iteration.
        var calls = 0
        weak var weakSource: IOSource?
        do {
            let source = try loop.addIO(fd: readEnd, events: .readable) { source, _ in
                calls += 1
                source.cancel()
                source.cancel()  // Idempotent.
            }
            weakSource = source
            #expect(loop.sourceCount == 1)
        }
        try loop.addTimer(at: loop.now + 20_000_000) { timer in
            timer.cancel()
            try? loop.exit(code: 0)
        }
        #expect(try run(loop) == 0)
        #expect(calls == 1)
        #expect(weakSource == nil)  // The destroy callback gave back the loop's retain: nothing leaked.
        #expect(loop.sourceCount == 0)
    }

    @Test func releasingTheLoopReleasesItsSources() throws {
        weak var weakTimer: TimerSource?
        weak var weakLoop: EventLoop?
        do {
            let loop = try EventLoop()
            weakLoop = loop
            let timer = try loop.addTimer(at: loop.now + 60_000_000_000) { _ in }
            weakTimer = timer
            #expect(throws: Never.self) { try timer.setEnabled(true) }
        }
        #expect(weakLoop == nil)
        #expect(weakTimer == nil)
    }

    @Test func cancelledSourceReportsStale() throws {
        let loop = try EventLoop()
        let timer = try loop.addTimer(at: loop.now + 60_000_000_000) { _ in }
        timer.cancel()
        #expect(timer.isCancelled)
        let error = #expect(throws: Errno.self) { try timer.rearm(at: 0) }
        #expect(error?.rawValue == ESTALE)
    }

    @Test func watchdogIsOffWithoutAServiceManager() throws {
        try #require(getenv("WATCHDOG_USEC") == nil, "the test runs outside a watchdog-enabled unit")
        let loop = try EventLoop()
        #expect(try loop.enableWatchdog() == false)
        #expect(try ServiceNotifier().watchdogInterval() == nil)
    }

    @Test func nowFollowsTheMonotonicClock() throws {
        let before = MonotonicClock.now()
        let loop = try EventLoop()
        var seen: Int64 = 0
        try loop.addDefer {
            seen = loop.now
            try? loop.exit(code: 0)
        }
        #expect(try run(loop) == 0)
        // sd-event keeps microseconds, so allow for the truncation.
        #expect(seen >= before - 1000)
        #expect(seen <= MonotonicClock.now())
    }
}
