// The manager's clock: the manual clock fires timers like a manual event loop; the loop clock through sd-event.

import BGTaskCore
import BGTaskSystem
import BGTaskTestSupport
import Testing

@testable import BGTaskDaemon

@Suite("The manager's clock")
struct ManagerClockTests {
    @Test("manual: timers fire in deadline order, one deadline in arming order, each with the clock at its deadline")
    func manualOrder() throws {
        let clock = ManagerClock(mode: .manual(start: .seconds(100)), loop: try EventLoop())
        var fired: [String] = []
        var timers: [String: ManagerTimer] = [:]
        for name in ["late", "first", "second", "disarmed"] {
            timers[name] = try clock.makeTimer(name: name, accuracy: .zero) { fired.append("\(name)@\(clock.now)") }
        }
        try timers["late"]?.rearm(at: .seconds(105))
        try timers["first"]?.rearm(at: .seconds(103))
        try timers["second"]?.rearm(at: .seconds(103))
        try timers["disarmed"]?.rearm(at: .seconds(101))
        timers["disarmed"]?.disarm()
        clock.advance(to: .seconds(102))
        #expect(fired.isEmpty)
        #expect(clock.now == .seconds(102))
        clock.advance(to: .seconds(110))
        #expect(fired == ["first@103.0s", "second@103.0s", "late@105.0s"])
        #expect(clock.now == .seconds(110))
        #expect(timers.values.allSatisfy { $0.deadline == nil }, "a fired timer stays armed")
    }

    @Test("manual: a timer re-armed by a handler within the advance fires in it; time never moves back")
    func rearmFromHandler() throws {
        let clock = ManagerClock(mode: .manual(start: .seconds(0)), loop: try EventLoop())
        var instants: [MonotonicInstant] = []
        var timer: ManagerTimer?
        timer = try clock.makeTimer(name: "repeat", accuracy: .zero) {
            instants.append(clock.now)
            if instants.count < 3 { try? timer?.rearm(at: clock.now + .seconds(2)) }
        }
        try timer?.rearm(at: .seconds(1))
        clock.advance(to: .seconds(10))
        #expect(instants == [.seconds(1), .seconds(3), .seconds(5)])
        clock.advance(to: .seconds(4))
        #expect(clock.now == .seconds(10))
        // A deadline already past fires at the next advance, at the current time.
        try timer?.rearm(at: .seconds(7))
        clock.advance(to: .seconds(10))
        #expect(instants.last == .seconds(10))
    }

    @Test("loop: a timer is an sd-event timer on CLOCK_MONOTONIC, disarmed once it fired")
    func loopTimer() throws {
        let loop = try EventLoop()
        let clock = ManagerClock(mode: .loop, loop: loop)
        #expect(!clock.isManual)
        var firedAt: MonotonicInstant?
        let timer = try clock.makeTimer(name: "soon", accuracy: .microseconds(1)) { firedAt = clock.now }
        let due = clock.freshNow + .milliseconds(1)
        try timer.rearm(at: due)
        #expect(timer.deadline == due)
        for _ in 0..<100 where firedAt == nil { try loop.runIteration(timeout: .seconds(1)) }
        let fired = try #require(firedAt)
        #expect(fired >= due)
        #expect(timer.deadline == nil)
    }
}
