// The journal's hand-written JSON against the synthesized Encodable form, for the strings a peer chooses.

import BGTaskTestSupport
import Foundation
import Testing

@testable import BGTaskCore

@Suite("Changes written by hand")
struct ChangesJSONTests {
    @Test(
        "a task name is escaped as a JSON encoder escapes it, and reads back the same",
        arguments: ["plain", "quote \" and backslash \\", "line\nfeed\ttab\r", "\u{1}\u{1F}\u{7F}", "é日本😀", ""])
    func taskNames(_ name: String) throws {
        let h = PolicyHarness()
        h.startTrackingChanges()
        let app = try h.register("app")
        _ = try h.begin(app, name)
        let changes = h.takeChanges()
        var writer = ChangesJSONWriter { Array(try JSONEncoder().encode($0)) }
        var written: [UInt8] = []
        try writer.write(changes, to: &written)
        let byHand = try JSONSerialization.jsonObject(with: Data(written)) as? NSDictionary
        let synthesized = try JSONSerialization.jsonObject(with: JSONEncoder().encode(changes)) as? NSDictionary
        #expect(byHand != nil && byHand == synthesized, "\(String(decoding: written, as: UTF8.self))")
        let read = try JSONDecoder().decode(LifecycleChanges.self, from: Data(written))
        #expect(read.apps.first?.openTasks.first?.name == name)
    }
}
