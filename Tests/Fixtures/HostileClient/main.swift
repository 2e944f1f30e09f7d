// A hostile Varlink client for tests, run as another user: floods of connections, registrations, bytes and calls.
//
// Usage: BGTaskHostileClient MODE --socket PATH [options] [--lifetime SECONDS]
//   connections --count N        open N connections, then probe each with GetInfo; prints
//                                `answered A closed C failed F`, holds them until stdin closes, prints `released`
//   register --count N --prefix P  Register P-1 ... P-N (more: true), each on its own connection; prints
//                                `registered R refused F error=FIRST-ERROR-REPLY|none`, holds until stdin closes
//   cycle --count N --prefix P   Register P-1 ... P-N one after another, each on a connection closed as soon as it
//                                is answered; prints `registered R refused F error=...`, stays alive until stdin
//                                closes, prints `released`
//   stream-flood --stream watch|register --bytes N
//                                makes the streaming call, then sends up to N bytes with no NUL; prints
//                                `sent BYTES closed` (the daemon closed), `sent BYTES stalled` (it stopped reading
//                                for 5 s without closing) or `sent BYTES finished`; holds the connection until
//                                stdin closes, prints `released`
//   pipeline --count N --call JSON  connects, prints `connected`, waits for a line on stdin, then writes N copies
//                                of the call while reading replies; prints `replies R errors E` (or `closed` early)
// The process ends by itself after --lifetime seconds (default 60), so a test that loses it cannot leave it behind.

import BGTaskPOSIX
import Glibc

/// The command line, parsed.
struct Options {
    var mode = ""
    var socketPath = ""
    var count = 1
    var prefix = "hostile"
    var streamingCall = "watch"
    var byteLimit = 64 << 20
    var call = #"{"method":"org.varlink.service.GetInfo"}"#
    var lifetimeSeconds: UInt32 = 60
}

func fail(_ message: String, code: Int32 = 2) -> Never {
    try? FileDescriptor.standardError.writeAll(Array("BGTaskHostileClient: \(message)\n".utf8))
    exit(code)
}

func say(_ line: String) {
    // A failed write to stdout means the test is gone: nothing is left to tell.
    try? FileDescriptor.standardOutput.writeAll(Array((line + "\n").utf8))
}

func parseOptions() -> Options {
    var options = Options()
    var arguments = CommandLine.arguments.dropFirst()
    guard let mode = arguments.popFirst() else { fail("usage: BGTaskHostileClient MODE --socket PATH ...", code: 64) }
    options.mode = mode
    while let flag = arguments.popFirst() {
        guard let value = arguments.popFirst() else { fail("\(flag) needs a value", code: 64) }
        switch flag {
        case "--socket": options.socketPath = value
        case "--count": options.count = Int(value) ?? -1
        case "--prefix": options.prefix = value
        case "--stream": options.streamingCall = value
        case "--call": options.call = value
        case "--bytes": options.byteLimit = Int(value) ?? -1
        case "--lifetime": options.lifetimeSeconds = UInt32(value) ?? 0
        default: fail("unknown option \(flag)", code: 64)
        }
    }
    guard !options.socketPath.isEmpty, options.count > 0, options.byteLimit >= 0, options.lifetimeSeconds > 0 else {
        fail("bad options", code: 64)
    }
    return options
}

/// Waits until stdin reaches end of file (the test closed it or died).
func waitForEndOfInput() {
    while let chunk = try? FileDescriptor.standardInput.read(upTo: 4096), !chunk.isEmpty {}
}

/// Reads one NUL-terminated reply within `timeout`; nil when the daemon closed the connection or did not answer.
func readReply(_ socket: FileDescriptor, timeout: Duration) -> [UInt8]? {
    var reply: [UInt8] = []
    let deadline = MonotonicClock.now() + timeout.nanosecondCount
    while !reply.contains(0) {
        let remaining = deadline - MonotonicClock.now()
        guard remaining > 0, let ready = try? socket.poll(for: .readable, timeout: .nanoseconds(remaining)),
            !ready.isEmpty
        else { return nil }
        guard let chunk = try? socket.read(upTo: 65536), !chunk.isEmpty else { return nil }
        reply += chunk
    }
    return Array(reply.prefix { $0 != 0 })
}

func message(_ json: String) -> [UInt8] { Array(json.utf8) + [0] }

/// The outcome of one non-blocking send.
enum SendOutcome {
    case sent(Int)
    case wouldBlock
    case closed
}

/// Sends what the socket takes of `bytes` now; `.closed` when the daemon closed the connection (EPIPE, ECONNRESET).
func sendOnce(_ bytes: ArraySlice<UInt8>, on socket: FileDescriptor) -> SendOutcome {
    bytes.withUnsafeBytes { buffer in
        do {
            return .sent(try socket.send(buffer))
        } catch {
            return (error as? Errno) == .wouldBlock ? .wouldBlock : .closed
        }
    }
}

func openConnections(_ options: Options) {
    var sockets: [FileDescriptor] = []
    var failed = 0
    for _ in 0..<options.count {
        do {
            sockets.append(try UnixSocket.connect(path: options.socketPath))
        } catch {
            failed += 1
        }
    }
    var answered = 0
    for socket in sockets {
        let probe = message(#"{"method":"org.varlink.service.GetInfo"}"#)
        if (try? socket.sendAll(probe)) != nil, readReply(socket, timeout: .seconds(5)) != nil { answered += 1 }
    }
    say("answered \(answered) closed \(sockets.count - answered) failed \(failed)")
    waitForEndOfInput()
    for socket in sockets { try? socket.close() }
    say("released")
}

func registerApps(_ options: Options, closingEach: Bool = false) {
    var sockets: [FileDescriptor] = []
    var registered = 0
    var firstError: String?
    for index in 1...options.count {
        let call =
            #"{"method":"io.bgtask.Lifecycle.Register","parameters":{"name":"\#(options.prefix)-\#(index)"},"#
            + #""more":true}"#
        guard let socket = try? UnixSocket.connect(path: options.socketPath) else {
            firstError = firstError ?? "connect failed"
            continue
        }
        sockets.append(socket)
        guard (try? socket.sendAll(message(call))) != nil, let reply = readReply(socket, timeout: .seconds(5)) else {
            firstError = firstError ?? "no reply"
            continue
        }
        let text = String(decoding: reply, as: UTF8.self)
        if text.contains(#""error":"#) {
            firstError = firstError ?? text
        } else {
            registered += 1
        }
        if closingEach, let socket = sockets.popLast() { try? socket.close() }
    }
    say("registered \(registered) refused \(options.count - registered) error=\(firstError ?? "none")")
    waitForEndOfInput()
    for socket in sockets { try? socket.close() }
    say("released")
}

/// Makes the streaming call, then floods bytes with no NUL; returns the outcome line.
func floodStream(_ options: Options, on socket: FileDescriptor) -> String {
    switch options.streamingCall {
    case "watch":
        guard (try? socket.sendAll(message(#"{"method":"io.bgtask.Lifecycle.Watch","more":true}"#))) != nil else {
            fail("cannot send Watch")
        }
    case "register":
        let call = #"{"method":"io.bgtask.Lifecycle.Register","parameters":{"name":"\#(options.prefix)"},"more":true}"#
        guard (try? socket.sendAll(message(call))) != nil, readReply(socket, timeout: .seconds(5)) != nil else {
            fail("Register was not answered")
        }
    default:
        fail("--stream is watch or register", code: 64)
    }
    do {
        try socket.setNonBlocking()
    } catch {
        fail("cannot make the socket non-blocking: \(error)")
    }
    let chunk = [UInt8](repeating: UInt8(ascii: "x"), count: 64 << 10)
    var sent = 0
    while sent < options.byteLimit {
        guard let ready = try? socket.poll(for: .writable, timeout: .seconds(5)), !ready.isEmpty else {
            return "sent \(sent) stalled"
        }
        switch sendOnce(chunk[0..<min(chunk.count, options.byteLimit - sent)], on: socket) {
        case .sent(let count): sent += count
        case .wouldBlock: continue
        // EPIPE or ECONNRESET: the daemon closed the connection.
        case .closed: return "sent \(sent) closed"
        }
    }
    return "sent \(sent) finished"
}

/// Floods a stream, says how it went, and keeps the connection until stdin closes.
func floodStreamAndHold(_ options: Options) {
    guard let socket = try? UnixSocket.connect(path: options.socketPath) else { fail("cannot connect") }
    say(floodStream(options, on: socket))
    waitForEndOfInput()
    try? socket.close()
    say("released")
}

func pipelineCalls(_ options: Options) {
    guard let socket = try? UnixSocket.connect(path: options.socketPath) else { fail("cannot connect") }
    say("connected")
    guard let go = try? FileDescriptor.standardInput.read(upTo: 4096), !go.isEmpty else { return }
    do {
        try socket.setNonBlocking()
    } catch {
        fail("cannot make the socket non-blocking: \(error)")
    }
    let one = message(options.call)
    let batch = Array([[UInt8]](repeating: one, count: 64).joined())
    var callsWritten = 0
    var pending: ArraySlice<UInt8> = []
    var replies = 0
    var errors = 0
    var partial: [UInt8] = []
    while replies < options.count {
        if pending.isEmpty && callsWritten < options.count {
            let calls = min(64, options.count - callsWritten)
            pending = batch[0..<(calls * one.count)]
            callsWritten += calls
        }
        let wanted: IOEvents = pending.isEmpty ? .readable : [.readable, .writable]
        guard let ready = try? socket.poll(for: wanted, timeout: .seconds(10)), !ready.isEmpty else {
            say("replies \(replies) errors \(errors) stalled")
            return
        }
        if ready.contains(.writable) && !pending.isEmpty {
            switch sendOnce(pending, on: socket) {
            case .sent(let count): pending = pending.dropFirst(count)
            case .wouldBlock: break
            case .closed:
                say("replies \(replies) errors \(errors) closed")
                return
            }
        }
        if ready.contains(.readable) || ready.contains(.hangUp) {
            guard let chunk = try? socket.read(upTo: 1 << 16), !chunk.isEmpty else {
                say("replies \(replies) errors \(errors) closed")
                return
            }
            for byte in chunk {
                if byte == 0 {
                    replies += 1
                    if String(decoding: partial, as: UTF8.self).contains(#""error":"#) { errors += 1 }
                    partial.removeAll(keepingCapacity: true)
                } else if partial.count < 1 << 16 {
                    partial.append(byte)
                }
            }
        }
    }
    say("replies \(replies) errors \(errors)")
}

let options = parseOptions()
alarm(options.lifetimeSeconds)
// A peer that closes must not kill the fixture: sends use MSG_NOSIGNAL, and SIGPIPE is ignored for the rest.
signal(SIGPIPE, SIG_IGN)
switch options.mode {
case "connections": openConnections(options)
case "register": registerApps(options)
case "cycle": registerApps(options, closingEach: true)
case "stream-flood": floodStreamAndHold(options)
case "pipeline": pipelineCalls(options)
default: fail("unknown mode \(options.mode)", code: 64)
}
