// The policy core (standard library only) and the wire protocol (Foundation) each spell the interface's words;
// the daemon converts between them by raw value. These tests keep the two spellings the same.

import BGTaskCore
import BGTaskProtocol
import Testing

@Suite("Core and wire vocabularies match")
struct VocabularyParityTests {
    private func sameWords<Core: CaseIterable & RawRepresentable, Wire: CaseIterable & RawRepresentable>(
        _ core: Core.Type, _ wire: Wire.Type
    ) -> (coreOnly: Set<String>, wireOnly: Set<String>) where Core.RawValue == String, Wire.RawValue == String {
        let coreWords = Set(Core.allCases.map(\.rawValue))
        let wireWords = Set(Wire.allCases.map(\.rawValue))
        return (coreWords.subtracting(wireWords), wireWords.subtracting(coreWords))
    }

    @Test func appStates() {
        let difference = sameWords(BGTaskCore.AppState.self, BGTaskProtocol.AppState.self)
        #expect(difference.coreOnly.isEmpty && difference.wireOnly.isEmpty, "\(difference)")
    }

    @Test func eventKinds() {
        let difference = sameWords(BGTaskCore.EventKind.self, BGTaskProtocol.EventKind.self)
        #expect(difference.coreOnly.isEmpty && difference.wireOnly.isEmpty, "\(difference)")
    }

    @Test func terminationReasons() {
        let difference = sameWords(TerminationReason.self, ExitReason.self)
        #expect(difference.coreOnly.isEmpty && difference.wireOnly.isEmpty, "\(difference)")
    }

    @Test func deliveryBehaviours() {
        let difference = sameWords(DeliveryBehavior.self, PostBehavior.self)
        #expect(difference.coreOnly.isEmpty && difference.wireOnly.isEmpty, "\(difference)")
    }

    @Test func taskEndings() {
        let difference = sameWords(TaskEndCause.self, TaskEnd.self)
        #expect(difference.coreOnly.isEmpty && difference.wireOnly.isEmpty, "\(difference)")
    }

    @Test func auditKindsAreHistoryKinds() {
        // Every audit kind is a history kind; `launched` is the wire's word for a launch record.
        let difference = sameWords(AuditKind.self, HistoryKind.self)
        #expect(difference.coreOnly.isEmpty, "\(difference)")
        #expect(difference.wireOnly.isSubset(of: ["launched"]), "\(difference)")
    }

    @Test func bands() {
        #expect(Set(ReclamationBand.allCases.map(\.name)) == Set(ReclaimBand.allCases.map(\.rawValue)))
    }

    @Test func requestableStatesAreStates() {
        for state in RequestedState.allCases {
            #expect(BGTaskProtocol.AppState(rawValue: state.rawValue) != nil)
        }
    }
}
