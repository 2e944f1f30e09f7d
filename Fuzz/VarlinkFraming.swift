// libFuzzer target: a Varlink byte stream as the daemon reads it, cut into reads of any size, each message then
// decoded as the server decodes a call.
//
// Asserts that `VarlinkFrameDecoder` returns exactly the NUL-separated pieces of the stream, whatever the cuts,
// never a message over its limit, never buffers more than the limit plus one read, fails exactly when a piece is
// too long and stays failed; and that every accepted call's parameters re-encode and decode to the same value.
import BGTaskProtocol

/// One codec for every input, as a connection of the daemon reuses one.
private let codec = VarlinkCodec()

/// A small limit, so that inputs the fuzzer can build cross it; the default limit is exercised as well.
private let smallLimit = 96

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzVarlinkFraming(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: start, count: count))
    for message in checkFraming(input, limit: VarlinkFrameDecoder.defaultMaximumMessageSize) {
        decodeAsServer(message)
    }
    _ = checkFraming(input, limit: smallLimit)
    return 0
}

/// What the decoder must produce for `input`: the complete pieces before the first piece over `limit`, and
/// whether there is such a piece (the unterminated tail counts once it is over the limit).
private func expectedFrames(_ input: [UInt8], limit: Int) -> (messages: [[UInt8]], fails: Bool) {
    let pieces = input.split(separator: 0, omittingEmptySubsequences: false)
    var messages: [[UInt8]] = []
    for (index, piece) in pieces.enumerated() {
        if piece.count > limit { return (messages, true) }
        // The last piece has no NUL after it: it is not a message yet.
        if index < pieces.count - 1 { messages.append(Array(piece)) }
    }
    return (messages, false)
}

/// Feeds `input` to a decoder in reads whose sizes come from the input, checks every invariant, and returns the
/// messages it produced.
private func checkFraming(_ input: [UInt8], limit: Int) -> [[UInt8]] {
    let expected = expectedFrames(input, limit: limit)
    var decoder = VarlinkFrameDecoder(maximumMessageSize: limit)
    var messages: [[UInt8]] = []
    var failed = false
    var offset = 0
    while offset < input.count && !failed {
        // A read of 1 to 64 bytes, its size taken from the byte it starts with.
        let size = min(1 + Int(input[offset] % 64), input.count - offset)
        precondition(decoder.bufferedByteCount <= limit, "buffered more than the limit between reads")
        decoder.append(contentsOf: input[offset..<offset + size])
        precondition(decoder.bufferedByteCount <= limit + size, "buffered more than the limit plus one read")
        offset += size
        do throws(VarlinkFramingError) {
            while let message = try decoder.nextMessage() {
                precondition(message.count <= limit, "a message over the limit was returned")
                precondition(!message.contains(0), "a message holds a NUL")
                messages.append(message)
            }
        } catch {
            precondition(error == .messageTooLarge(limit: limit), "unexpected framing error \(error)")
            precondition(decoder.bufferedByteCount == 0, "the failed decoder still holds bytes")
            failed = true
        }
    }
    if failed {
        // Permanent: later bytes, even a lone NUL, only repeat the failure.
        decoder.append(contentsOf: [0])
        do throws(VarlinkFramingError) {
            _ = try decoder.nextMessage()
            preconditionFailure("a failed decoder returned a message")
        } catch {
            precondition(error == .messageTooLarge(limit: limit), "a failed decoder changed its error")
        }
    }
    precondition(failed == expected.fails, "failure \(failed), expected \(expected.fails)")
    precondition(messages.map { Array($0) } == expected.messages, "the messages differ from the stream's pieces")
    return messages
}

/// Decodes `message` as the daemon does: the header, then the parameters of the method it names.
private func decodeAsServer(_ message: [UInt8]) {
    let header: VarlinkCallHeader
    do throws(VarlinkProtocolError) {
        header = try codec.decodeCallHeader(message)
    } catch {
        _ = error.description
        return
    }
    if let method = LifecycleMethod(header.method) {
        checkParameters(method.parametersType, in: message, header: header)
    } else if let method = VarlinkServiceMethod(header.method) {
        switch method {
        case .getInfo: checkParameters(GetInfoParameters.self, in: message, header: header)
        case .getInterfaceDescription:
            checkParameters(GetInterfaceDescriptionParameters.self, in: message, header: header)
        }
    }
}

/// Decodes the parameters as `type`; when they decode, re-encodes the call and checks it decodes to the same
/// header and parameters. When they do not, the error must be encodable as the daemon's error reply.
private func checkParameters<P: VarlinkMethodCall>(_ type: P.Type, in message: [UInt8], header: VarlinkCallHeader) {
    let parameters: P
    do throws(VarlinkError) {
        parameters = try codec.decodeParameters(P.self, from: message)
    } catch {
        do {
            _ = try codec.encodeError(error)
        } catch {
            preconditionFailure("the error reply for \(P.methodName) cannot be encoded: \(error)")
        }
        return
    }
    do {
        let framed = try codec.encodeCall(parameters, more: header.more, oneway: header.oneway)
        precondition(framed.last == 0 && framed.firstIndex(of: 0) == framed.count - 1, "bad framing of a call")
        let again = Array(framed.dropLast())
        let header2 = try codec.decodeCallHeader(again)
        precondition(header2.method.qualified == P.methodName, "re-encoded call names another method")
        precondition(header2.more == header.more && header2.oneway == header.oneway, "flags changed")
        let parameters2 = try codec.decodeParameters(P.self, from: again)
        // Every parameter struct is Hashable (the interface's tests check it), so the cast succeeds.
        precondition(
            parameters as? AnyHashable == parameters2 as? AnyHashable && parameters as? AnyHashable != nil,
            "\(P.methodName) parameters changed in a round trip: \(parameters) became \(parameters2)")
    } catch {
        preconditionFailure("\(P.methodName) parameters \(parameters) do not round-trip: \(error)")
    }
}
