// Tests of the NUL framing: split reads, many messages per read, empty and oversize messages.
import BGTaskProtocol
import Foundation
import Testing

/// Feeds `chunks` to a fresh decoder, popping messages after each; the messages, or the error that stopped it.
/// The chunks go in by turns through `append(contentsOf:)` of a collection and of a raw buffer (the daemon's
/// reads), so every table and split below holds for both.
private func decode(
    _ chunks: [[UInt8]], maximumMessageSize: Int = VarlinkFrameDecoder.defaultMaximumMessageSize
) -> (messages: [[UInt8]], error: VarlinkFramingError?, buffered: Int) {
    var decoder = VarlinkFrameDecoder(maximumMessageSize: maximumMessageSize)
    var messages: [[UInt8]] = []
    do {
        for (index, chunk) in chunks.enumerated() {
            if index.isMultiple(of: 2) {
                decoder.append(contentsOf: chunk)
            } else {
                chunk.withUnsafeBytes { decoder.append(contentsOf: $0) }
            }
            while let message = try decoder.nextMessage() {
                messages.append(Array(message))
            }
        }
    } catch {
        return (messages, error, decoder.bufferedByteCount)
    }
    return (messages, nil, decoder.bufferedByteCount)
}

/// The messages, each followed by NUL, as one byte stream.
private func stream(_ messages: [String]) -> [UInt8] {
    messages.flatMap { Array($0.utf8) + [0] }
}

struct FramingTests {
    struct Row: CustomTestStringConvertible, Sendable {
        var name: String
        var chunks: [[UInt8]]
        var maximumMessageSize = 16
        /// The messages the chunks hold, in order.
        var messages: [String]
        /// Whether the last bytes exceed the limit.
        var isOversize = false
        /// Bytes left without their NUL at the end.
        var leftover = 0

        var testDescription: String { name }
    }

    static let rows: [Row] = [
        Row(name: "one message in one read", chunks: [stream(["{}"])], messages: ["{}"]),
        Row(
            name: "several messages in one read", chunks: [stream(["{\"a\":1}", "{}", "[]"])],
            messages: ["{\"a\":1}", "{}", "[]"]),
        Row(name: "empty message", chunks: [[0]], messages: [""]),
        Row(
            name: "empty messages between others", chunks: [Array("a".utf8) + [0, 0, 0] + Array("b".utf8) + [0]],
            messages: ["a", "", "", "b"]),
        Row(name: "no NUL yet", chunks: [Array("{\"method\":".utf8)], messages: [], leftover: 10),
        Row(
            name: "message then partial", chunks: [stream(["{}"]) + Array("{\"x".utf8)], messages: ["{}"],
            leftover: 3),
        Row(name: "NUL arrives alone", chunks: [Array("{}".utf8), [0]], messages: ["{}"]),
        Row(
            name: "exactly the limit", chunks: [stream([String(repeating: "x", count: 16)])],
            messages: [String(repeating: "x", count: 16)]),
        Row(
            name: "one over the limit with its NUL", chunks: [stream([String(repeating: "x", count: 17)])],
            messages: [], isOversize: true),
        Row(
            name: "over the limit before any NUL", chunks: [Array(repeating: UInt8(ascii: "x"), count: 17)],
            messages: [], isOversize: true),
        Row(
            name: "limit reached across reads", chunks: Array(repeating: Array("xxxxx".utf8), count: 4),
            messages: [], isOversize: true),
        Row(
            name: "good message then oversize", chunks: [stream(["{}", String(repeating: "y", count: 40)])],
            messages: ["{}"], isOversize: true),
        Row(
            name: "limit counts from the message start, not the read",
            chunks: [stream([String(repeating: "a", count: 10)]) + Array("bbbbbbbbbb".utf8), stream(["cc"])],
            messages: [String(repeating: "a", count: 10), "bbbbbbbbbbcc"]),
    ]

    @Test(arguments: rows)
    func table(_ row: Row) {
        let result = decode(row.chunks, maximumMessageSize: row.maximumMessageSize)
        #expect(result.messages == row.messages.map { Array($0.utf8) })
        #expect(result.error == (row.isOversize ? .messageTooLarge(limit: row.maximumMessageSize) : nil))
        if !row.isOversize {
            #expect(result.buffered == row.leftover)
        }
    }

    @Test func splitAtEveryByteBoundary() {
        let messages = [#"{"method":"io.bgtask.Lifecycle.ListApps"}"#, "", #"{"parameters":{"é":"ü"}}"#]
        let bytes = stream(messages)
        let expected = messages.map { Array($0.utf8) }
        for first in 0...bytes.count {
            let result = decode([Array(bytes[..<first]), Array(bytes[first...])], maximumMessageSize: 64)
            #expect(result.messages == expected, "split at \(first)")
            #expect(result.error == nil)
            #expect(result.buffered == 0)
            // Three pieces: every second cut after the first.
            for second in first...bytes.count {
                let pieces = [Array(bytes[..<first]), Array(bytes[first..<second]), Array(bytes[second...])]
                #expect(decode(pieces, maximumMessageSize: 64).messages == expected, "split at \(first), \(second)")
            }
        }
    }

    @Test func oneByteAtATime() {
        let messages = (0..<50).map { #"{"n":\#($0)}"# }
        let bytes = stream(messages)
        let result = decode(bytes.map { [$0] })
        #expect(result.messages == messages.map { Array($0.utf8) })
    }

    @Test func manyMessagesThroughOneDecoderKeepTheBufferSmall() throws {
        // Reads of an odd size, so messages straddle reads and the consumed prefix is compacted repeatedly.
        let messages = (0..<5000).map { #"{"method":"io.bgtask.Lifecycle.GetApp","parameters":{"app":"a\#($0)"}}"# }
        let bytes = stream(messages)
        var decoder = VarlinkFrameDecoder()
        var received: [String] = []
        var largestBuffer = 0
        var offset = 0
        while offset < bytes.count {
            let end = min(offset + 4099, bytes.count)
            decoder.append(contentsOf: bytes[offset..<end])
            offset = end
            while let message = try decoder.nextMessage() {
                received.append(String(decoding: message, as: UTF8.self))
            }
            largestBuffer = max(largestBuffer, decoder.bufferedByteCount)
        }
        #expect(received == messages)
        #expect(decoder.bufferedByteCount == 0)
        // Only a partial message stays buffered between reads.
        let longest = messages.map(\.utf8.count).max() ?? 0
        #expect(largestBuffer <= longest)
    }

    @Test func failureIsPermanent() {
        var decoder = VarlinkFrameDecoder(maximumMessageSize: 4)
        decoder.append(contentsOf: Array("toolong".utf8))
        #expect(throws: VarlinkFramingError.messageTooLarge(limit: 4)) { try decoder.nextMessage() }
        decoder.append(contentsOf: stream(["ok"]))
        #expect(throws: VarlinkFramingError.messageTooLarge(limit: 4)) { try decoder.nextMessage() }
    }

    @Test func defaultLimitIs64KiB() throws {
        let limit = VarlinkFrameDecoder.defaultMaximumMessageSize
        var decoder = VarlinkFrameDecoder()
        decoder.append(contentsOf: Array(repeating: UInt8(ascii: " "), count: limit) + [0])
        #expect(try decoder.nextMessage()?.count == limit)
        decoder.append(contentsOf: Array(repeating: UInt8(ascii: " "), count: limit + 1))
        #expect(throws: VarlinkFramingError.messageTooLarge(limit: limit)) { try decoder.nextMessage() }
    }

    @Test func framingHelpersAppendOneNUL() {
        let json = Array(#"{"parameters":{}}"#.utf8)
        #expect(VarlinkFrame.frame(json) == json + [0])
        var output = Array("x".utf8)
        VarlinkFrame.append(json, to: &output)
        #expect(output == Array("x".utf8) + json + [0])
    }
}
