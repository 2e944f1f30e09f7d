// The events the daemon sends with a payload copied from its JSON text read exactly as the interface's own reply.

import BGTaskCore
import BGTaskJSON
import BGTaskProtocol
import Foundation
import Testing

@testable import BGTaskDaemon

extension EventInfo {
    /// The interface's own form of a core event, the payload parsed back into an object: what the daemon sent
    /// before it copied payloads as they were written.
    init(_ event: AppEvent) {
        var payload: [String: JSONValue]?
        if let text = event.payloadJSON, case .object(let members)? = try? JSONParser.parse(text.utf8) {
            payload = members
        }
        self.init(
            id: Int(event.id.rawValue), kind: event.kind, taskIds: event.taskIDs?.map { Int($0.rawValue) },
            name: event.name, payload: payload, count: event.count, likelyVictim: event.likelyVictim, rank: event.rank)
    }
}

@Suite("Event replies")
struct EventReplyTests {
    static let events: [AppEvent] = [
        AppEvent(id: EventID(rawValue: 1), kind: .didEnterBackground),
        AppEvent(id: EventID(rawValue: 2), kind: .backgroundTaskExpiring, taskIDs: [TaskID(rawValue: 3)]),
        AppEvent(
            id: EventID(rawValue: 4), kind: .notification, name: "news",
            // As `Post` writes it (`JSONValue.jsonText()`): keys sorted, the string escaped.
            payloadJSON: #"{"a":null,"b":[1,2.5,"é\n"],"c":{"d":true}}"#,
            count: 3),
        AppEvent(id: EventID(rawValue: 5), kind: .memoryWarning, likelyVictim: true, rank: 1),
    ]

    @Test("EventReply encodes byte for byte as RegisterReply(event: EventInfo(event))", arguments: events)
    func sameBytes(_ event: AppEvent) throws {
        let codec = VarlinkCodec()
        let spliced = try codec.encodeReply(EventReply(event), continues: true)
        let reference = try codec.encodeReply(RegisterReply(app: nil, event: EventInfo(event)), continues: true)
        #expect(
            spliced == reference,
            "\(String(decoding: spliced, as: UTF8.self)) against \(String(decoding: reference, as: UTF8.self))")
    }

    @Test("RawJSON: copied as it is by JSONTextEncoder, the value it stands for through Foundation's encoder")
    func rawJSON() throws {
        let value: JSONValue = ["x": [1, "two", .null], "y": 1e300]
        let raw = try RawJSON(value)
        #expect(try JSONTextEncoder().encode(["k": raw]) == Array(#"{"k":"#.utf8) + (try value.jsonText()) + [0x7D])
        let foreign = try JSONDecoder().decode([String: JSONValue].self, from: JSONEncoder().encode(["k": raw]))
        #expect(foreign == ["k": value])
    }
}
