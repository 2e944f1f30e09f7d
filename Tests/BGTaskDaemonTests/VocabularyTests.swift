// One vocabulary from the core to the wire: every word round-trips through JSON as itself, and every conversion
// between the core's narrower types and the shared ones is walked case by case, in both directions.

import BGTaskCore
import BGTaskProtocol
import Foundation
import Testing

@testable import BGTaskDaemon

@Suite("One vocabulary, core to wire")
struct VocabularyTests {
    /// Encodes every case as JSON and decodes it back: the raw value is the wire word, and nothing is lost.
    private func roundTrips<Word: CaseIterable & Codable & Equatable & RawRepresentable>(_ type: Word.Type) throws
    where Word.RawValue == String {
        for word in Word.allCases {
            let data = try JSONEncoder().encode([word])
            #expect(String(decoding: data, as: UTF8.self) == "[\"\(word.rawValue)\"]")
            #expect(try JSONDecoder().decode([Word].self, from: data) == [word])
        }
        #expect(throws: DecodingError.self) { try JSONDecoder().decode([Word].self, from: Data(#"["nope"]"#.utf8)) }
    }

    @Test func everyWordIsItsOwnWireSpelling() throws {
        try roundTrips(AppState.self)
        try roundTrips(EventKind.self)
        try roundTrips(DeliveryBehavior.self)
        try roundTrips(TerminationReason.self)
        try roundTrips(TaskEndCause.self)
        try roundTrips(ReclamationBand.self)
        try roundTrips(AuditKind.self)
    }

    @Test func requestedStatesBothWays() {
        for requested in RequestedState.allCases {
            #expect(RequestedState(requested.appState) == requested)
        }
        let requestable = AppState.allCases.filter { RequestedState($0) != nil }
        #expect(requestable == [.inactive, .active, .background])
        for state in requestable { #expect(RequestedState(state)?.appState == state) }
    }

    @Test func initialStatesBothWays() {
        for initial in [InitialState.active, .background] {
            #expect(InitialState(initial.appState) == initial)
        }
        let startable = AppState.allCases.filter { InitialState($0) != nil }
        #expect(startable == [.active, .background])
        for state in startable { #expect(InitialState(state)?.appState == state) }
    }

    @Test func processEndsAreTheirReasons() {
        #expect(ProcessEnd.exited.reason == .exited)
        #expect(ProcessEnd.crashed.reason == .crashed)
        #expect(!ProcessEnd.exited.reason.isDaemonInitiated && !ProcessEnd.crashed.reason.isDaemonInitiated)
    }

    @Test func bandsAreOrderedAsListed() {
        #expect(ReclamationBand.allCases.map(\.order) == Array(0..<ReclamationBand.allCases.count))
        #expect(ReclamationBand.allCases == ReclamationBand.allCases.sorted())
    }

    /// Every refusal of the core, as the wire error a client decodes back: the same name and parameters.
    static let refusals: [(BGTaskCore.LifecycleError, BGTaskProtocol.LifecycleError)] = [
        (.noSuchApp("mail"), .noSuchApp(app: "mail")),
        (.appExists("mail"), .appExists(app: "mail")),
        (.noSuchTask(app: "mail", task: TaskID(rawValue: 7)), .noSuchTask(app: "mail", taskId: 7)),
        (.backgroundTimeExhausted(app: "mail"), .backgroundTimeExhausted(app: "mail")),
        (.invalidState(app: "mail", state: .terminated), .invalidState(app: "mail", state: .terminated)),
        (.limitExceeded(limit: "TasksPerAppMax", max: 64), .limitExceeded(limit: "TasksPerAppMax", max: 64)),
        (.noSuchEvent(app: "mail", event: EventID(rawValue: 3)), .noSuchEvent(app: "mail", eventId: 3)),
    ]

    @Test func everyRefusalReachesTheWire() {
        for (core, wire) in Self.refusals {
            #expect(BGTaskProtocol.LifecycleError(varlinkError(core)) == wire)
        }
        // One row per case of the core's error: `varlinkError` switches over it with no default, so a new case
        // does not compile until it is mapped, and this table names each case once.
        let covered = Set(Self.refusals.map { String("\($0.0)".prefix { $0 != "(" }) })
        #expect(covered.count == Self.refusals.count)
    }
}
