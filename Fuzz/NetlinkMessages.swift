// libFuzzer target: the kernel's netlink messages as the condition sources read them, on any bytes.
//
// The rtnetlink parser must return, without reading past its input, at most one message per 16 bytes (a header's
// size) plus a final `.malformed` (a framing problem ends the datagram; a body's problem does not), and only
// routes whose output interfaces could each fit in the input; whatever it returns, the online rule counts only
// interfaces up. A well-formed message put in front of the input is read first, and the input after it as alone.
// A kernel uevent, when the parser takes the input as one, has an action and a path, at most the kernel's 64
// fields, and written back in the kernel's format parses to the same event.
import BGTaskSystem

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzNetlinkMessages(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: start, count: count))
    checkRouteMessages(bytes)
    checkUevent(bytes)
    return 0
}

private func checkRouteMessages(_ bytes: [UInt8]) {
    let messages = RouteNetlink.parse(bytes)
    precondition(messages.count <= bytes.count / 16 + 1, "\(messages.count) messages from \(bytes.count) bytes")
    var reachability = NetworkReachability()
    for (index, message) in messages.enumerated() {
        switch message {
        case .route(let route, _, _):
            precondition(route.outputInterfaces.count * 4 <= bytes.count, "interfaces beyond the input")
            reachability.routes.append(route)
        case .link(let link, _, _):
            reachability.links[link.index] = link
        case .malformed(let reason):
            precondition(!reason.isEmpty && index == messages.count - 1 || isBodyProblem(reason))
        default:
            break
        }
    }
    _ = reachability.isOnline
    precondition(reachability.defaultRouteInterfaces.allSatisfy { reachability.links[$0]?.isUp == true })
    // A well-formed `NLMSG_DONE` in front: read first, then the input as before (it is 4-byte aligned).
    var done: [UInt8] = []
    withUnsafeBytes(of: UInt32(20)) { done += $0 }
    withUnsafeBytes(of: UInt16(3)) { done += $0 }
    withUnsafeBytes(of: UInt16(2)) { done += $0 }
    withUnsafeBytes(of: UInt32(77)) { done += $0 }
    done += [UInt8](repeating: 0, count: 8)
    let prefixed = RouteNetlink.parse(done + bytes)
    precondition(prefixed.first == .done(sequence: 77, isInterrupted: false), "the well-formed message was misread")
    // The reasons name offsets, which the message in front moves.
    precondition(
        prefixed.dropFirst().map(withoutReason) == messages.map(withoutReason),
        "the input read differently after a message")
}

/// A problem of one message's body, after which the datagram's other messages are still read.
private func isBodyProblem(_ reason: String) -> Bool {
    !reason.hasPrefix("message length") && !reason.hasSuffix("after the last message")
}

private func withoutReason(_ message: RouteNetlinkMessage) -> RouteNetlinkMessage {
    if case .malformed = message { return .malformed("") }
    return message
}

private func checkUevent(_ bytes: [UInt8]) {
    guard let event = KernelUevent.parse(bytes) else { return }
    precondition(!event.action.isEmpty && !event.devicePath.isEmpty)
    precondition(event.properties.count <= KernelUevent.fieldLimit)
    var written = Array("\(event.action)@\(event.devicePath)".utf8) + [0]
    for (key, value) in event.properties.sorted(by: { $0.key < $1.key }) {
        written += Array("\(key)=\(value)".utf8) + [0]
    }
    precondition(KernelUevent.parse(written) == event, "\(event) written back reads differently")
}
