// A deliberately low-level Varlink client for tests: raw bytes out, parsed replies in, every wait bounded.

import BGTaskCore
import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import Foundation

/// A blocking connection to a Varlink socket that sends exactly what a test gives it (including garbage)
/// and reads NUL-framed replies as JSON objects.
public final class RawVarlinkClient {
    /// The connected socket.
    public let descriptor: FileDescriptor
    private var decoder = VarlinkFrameDecoder(maximumMessageSize: 16 << 20)
    private var isClosed = false

    /// Connects to `path`.
    public init(path: String) throws {
        descriptor = try UnixSocket.connect(path: path)
    }

    /// Takes over a socket connected elsewhere (by an app's stand-in process, so the server sees that process as
    /// the peer); closes it when done.
    public init(connected descriptor: FileDescriptor) {
        self.descriptor = descriptor
    }

    /// Sends raw bytes.
    public func sendRaw(_ bytes: [UInt8]) throws {
        try descriptor.sendAll(bytes)
    }

    /// Sends one call: `{"method": ..., "parameters": ..., "more": ..., "oneway": ...}` plus the NUL.
    public func send(
        _ method: String, _ parameters: [String: JSONValue] = [:], more: Bool = false, oneway: Bool = false
    ) throws {
        var call: [String: JSONValue] = ["method": .string(method), "parameters": .object(parameters)]
        if more { call["more"] = true }
        if oneway { call["oneway"] = true }
        let data = try JSONEncoder().encode(JSONValue.object(call))
        try sendRaw(Array(data) + [0])
    }

    /// The next reply as a JSON object, waiting at most `timeout`; nil when the server closed the connection.
    public func receive(timeout: Duration = .seconds(10)) throws -> [String: JSONValue]? {
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        while true {
            if let object = try nextDecodedReply() { return object }
            let remaining = deadline - MonotonicClock.now()
            guard remaining > 0 else { throw HarnessError("no reply within \(timeout)") }
            let ready = try descriptor.poll(for: .readable, timeout: .nanoseconds(remaining))
            guard !ready.isEmpty else { continue }
            guard let chunk = try readChunk(), !chunk.isEmpty else { return nil }
            decoder.append(contentsOf: chunk)
        }
    }

    /// What `poll()` found.
    public enum Arrival: Equatable {
        /// A reply (a JSON object).
        case reply([String: JSONValue])
        /// The server closed the connection.
        case closed
        /// Nothing yet.
        case nothing
    }

    /// The next reply if it has arrived, without waiting: for a test that steps the server itself.
    public func poll() throws -> Arrival {
        while true {
            if let object = try nextDecodedReply() { return .reply(object) }
            guard try !descriptor.poll(for: .readable, timeout: .zero).isEmpty else { return .nothing }
            guard let chunk = try readChunk(), !chunk.isEmpty else { return .closed }
            decoder.append(contentsOf: chunk)
        }
    }

    /// Sends a call and returns its (first) reply.
    @discardableResult
    public func call(
        _ method: String, _ parameters: [String: JSONValue] = [:], more: Bool = false
    ) throws -> [String: JSONValue] {
        try send(method, parameters, more: more)
        guard let reply = try receive() else { throw HarnessError("connection closed before replying to \(method)") }
        return reply
    }

    /// Whether the server closed the connection (end of file within `timeout`).
    public func isClosedByServer(timeout: Duration = .seconds(10)) throws -> Bool {
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        while MonotonicClock.now() < deadline {
            let remaining = deadline - MonotonicClock.now()
            let ready = try descriptor.poll(for: .readable, timeout: .nanoseconds(max(0, remaining)))
            if ready.isEmpty { continue }
            guard let chunk = try readChunk(), !chunk.isEmpty else { return true }
        }
        return false
    }

    /// The next complete reply already read, as a JSON object.
    private func nextDecodedReply() throws -> [String: JSONValue]? {
        guard let message = try decoder.nextMessage() else { return nil }
        guard case .object(let object) = try JSONDecoder().decode(JSONValue.self, from: Data(message)) else {
            throw HarnessError("reply is not a JSON object: \(String(decoding: message, as: UTF8.self))")
        }
        return object
    }

    /// Reads what is there; nil when the server reset the connection.
    private func readChunk() throws -> [UInt8]? {
        // A separate function: swiftc 6.3.1 crashes on a typed-throws do/catch that assigns a local.
        do {
            return try descriptor.read(upTo: 65536)
        } catch {
            if error == .connectionReset { return nil }
            throw error
        }
    }

    /// Closes the connection.
    public func close() {
        guard !isClosed else { return }
        isClosed = true
        try? descriptor.close()
    }

    deinit { close() }
}

extension RawVarlinkClient {
    /// Calls an `io.bgtask.Lifecycle` method and returns its reply.
    @discardableResult
    public func lifecycle(_ method: String, _ parameters: [String: JSONValue] = [:]) throws -> [String: JSONValue] {
        try call("io.bgtask.Lifecycle." + method, parameters)
    }

    /// `GetApp(app)`'s `app` object.
    public func app(_ name: String) throws -> [String: JSONValue] {
        let reply = try lifecycle("GetApp", ["app": .string(name)])
        guard let app = reply.parameters["app"]?.objectValue else { throw HarnessError("GetApp failed: \(reply)") }
        return app
    }
}

extension Dictionary where Key == String, Value == JSONValue {
    /// The `error` of a reply, if it is an error reply.
    public var errorName: String? {
        if case .string(let name) = self["error"] { return name }
        return nil
    }

    /// The `parameters` object of a reply.
    public var parameters: [String: JSONValue] {
        if case .object(let parameters) = self["parameters"] { return parameters }
        return [:]
    }
}
