// Readers that never read: a Watch stream left unread while another client makes audit records.

import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Testing

extension HeavyHostileClientTests {
    @Suite("Readers that never read")
    struct SilentReaderTests {
        /// Unsent output a streaming connection may have before the daemon disconnects it.
        static let streamOutputMax = 256 << 10

        /// The kernel's default socket send buffer: what the daemon's side of a connection can hold on top of its
        /// own buffer.
        private func kernelSendBuffer() throws -> Int {
            let text = try String(contentsOfFile: "/proc/sys/net/core/wmem_default", encoding: .utf8)
            guard let bytes = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)) else {
                throw HarnessError("wmem_default is not a number: \(text)")
            }
            return bytes
        }

        /// Reads what is left on `client`'s socket until end of file; returns the bytes and the messages (NULs) in
        /// them, nil if no end came within `timeout`.
        private func leftUntilEnd(
            of client: RawVarlinkClient, timeout: Duration = .seconds(10)
        ) throws -> (bytes: Int, messages: Int)? {
            let deadline = MonotonicClock.now() + timeout.nanosecondCount
            var bytes = 0
            var messages = 0
            while MonotonicClock.now() < deadline {
                guard try !client.descriptor.poll(for: .readable, timeout: .milliseconds(100)).isEmpty else { continue }
                switch receive(on: client.descriptor) {
                case .received(let chunk):
                    bytes += chunk.count
                    messages += chunk.lazy.filter { $0 == 0 }.count
                case .wouldBlock: continue
                case .closed: return (bytes, messages)
                }
            }
            return nil
        }

        @Test("a Watch client that never reads is disconnected once its unsent output passes 256 KiB")
        func watcherThatNeverReads() async throws {
            try await offThePool {
                let daemon = try DaemonHarness(configuration: configuration())
                let app = try daemon.startPythonApp(name: "busy")
                defer { app.terminate() }
                let vitals = try DaemonVitals(daemon)
                let watcher = try daemon.connect()
                defer { watcher.close() }
                try UnixSocket.setReceiveBufferSize(watcher.descriptor, bytes: 4096)
                try watcher.send("io.bgtask.Lifecycle.Watch", more: true)
                let control = try daemon.connect()
                defer { control.close() }
                // Each begin/end pair makes two audit records of about 250 bytes for the watcher.
                var pairs = 0
                while pairs < 10_000 {
                    if try watcher.descriptor.poll(for: .readHangUp, timeout: .zero).contains(.readHangUp) { break }
                    let begun = try control.lifecycle("BeginBackgroundTask", ["app": "busy", "name": "t"])
                    let task = try #require(begun.parameters["taskId"], "BeginBackgroundTask failed: \(begun)")
                    #expect(
                        try control.lifecycle("EndBackgroundTask", ["app": "busy", "taskId": task]).errorName == nil)
                    pairs += 1
                }
                #expect(pairs < 10_000, "the watcher was never disconnected")
                try vitals.expectNoSpin(while: "the disconnected watcher still has unread output")
                // What the daemon sent before giving up: two records per pair, each the size of those left to read.
                let left = try #require(try leftUntilEnd(of: watcher), "no end of file on the watcher")
                try #require(left.messages > 0, "nothing reached the watcher before it was disconnected")
                let produced = pairs * 2 * (left.bytes / left.messages)
                let bound = Self.streamOutputMax + (try kernelSendBuffer()) + (64 << 10)
                #expect(
                    produced <= bound,
                    Comment(
                        rawValue:
                            "the daemon queued about \(mebibytes(produced)) for the watcher (\(pairs) pairs) before "
                            + "disconnecting it; bound \(mebibytes(bound))"))
                try vitals.expectWithstood(
                    rssGrowthBelow: 16 << 20, while: nil,
                    release: {
                        watcher.close()
                        control.close()
                        app.terminate()
                    })
            }
        }
    }
}
