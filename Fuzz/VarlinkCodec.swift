// libFuzzer target: one Varlink message through every decoder of the codec, as a call and as a reply.
//
// Asserts that the JSON parser's trees write out and parse back unchanged; that `LeaseCallReader` reads only
// what the tree parser reads, as the same call whose parameters decode to the same values as every parameter type
// (the differential check), and that the daemon's codec refuses exactly what the tree alone refuses; that
// `decodeCall` (the daemon's one pass) and `decodeParameters(_:of:)` on its result, for every parameter type of
// both interfaces, agree with `decodeCallHeader` and `decodeParameters(_:from:)`, and that these and
// `decodeReply`, for every reply type, only ever throw their typed errors; that whatever decodes re-encodes to a
// message that decodes to the same value (calls, replies and error replies alike); that a typed error read from
// an error reply converts back to the same wire error; and that every error the server would answer with can be
// encoded.
import BGTaskJSON
import BGTaskProtocol

/// One codec for every input, as a connection reuses one.
private let codec = VarlinkCodec()
/// A codec that parses every call into a tree, lease calls included: what `LeaseCallReader` must agree with.
private let treeCodec = VarlinkCodec(readsLeaseCallsDirectly: false)

/// The parameter types of `org.varlink.service`; those of `io.bgtask.Lifecycle` come from `LifecycleMethod`.
private let serviceParameterTypes: [any VarlinkMethodCall.Type] = [
    GetInfoParameters.self, GetInterfaceDescriptionParameters.self,
]

/// Every parameter type of both interfaces, so a method added to `LifecycleMethod` is fuzzed without an edit.
private let parameterTypes: [any VarlinkMethodCall.Type] =
    LifecycleMethod.allCases.map(\.parametersType) + serviceParameterTypes

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzVarlinkCodec(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let message = Array(UnsafeBufferPointer(start: start, count: count))
    checkParserRoundTrip(message)
    checkLeaseReader(message)
    do throws(VarlinkProtocolError) {
        let call = try codec.decodeCall(message)
        let header = try codec.decodeCallHeader(message)
        precondition(header == call.header, "the header alone decodes differently")
        precondition(
            VarlinkMethodName(qualified: call.header.method.qualified) == call.header.method, "bad method name")
        for type in parameterTypes {
            checkCall(type, message: message, call: call)
        }
    } catch {
        _ = error.description
    }
    for type in parameterTypes {
        checkReply(type, message: message)
    }
    return 0
}

/// Whether two values of a Hashable type are equal; every wire type is Hashable (the interface's tests check it).
private func same<T>(_ lhs: T, _ rhs: T) -> Bool {
    guard let lhs = lhs as? AnyHashable, let rhs = rhs as? AnyHashable else {
        preconditionFailure("\(T.self) is not Hashable")
    }
    return lhs == rhs
}

/// Decodes the call's parameters as `P` and round-trips them; a refusal must encode as an error reply.
private func checkCall<P: VarlinkMethodCall>(_ type: P.Type, message: [UInt8], call: DecodedCall) {
    let header = call.header
    let parameters: P
    do throws(VarlinkError) {
        // As the daemon decodes: from the call parsed once.
        parameters = try codec.decodeParameters(P.self, of: call)
    } catch {
        precondition(
            (try? codec.decodeParameters(P.self, from: message)) == nil, "decodeParameters(from:) accepted it")
        precondition(
            VarlinkServiceError(error) != nil, "a parameter error is not an org.varlink.service error: \(error)")
        checkErrorEncodes(error)
        return
    }
    do {
        let fromMessage = try codec.decodeParameters(P.self, from: message)
        precondition(same(parameters, fromMessage), "the two decoding paths disagree on \(P.methodName)")
        let framed = try codec.encodeCall(parameters, more: header.more, oneway: header.oneway)
        let again = unframed(framed)
        let header2 = try codec.decodeCallHeader(again)
        precondition(header2.method.qualified == P.methodName, "re-encoded call names another method")
        precondition(header2.more == header.more && header2.oneway == header.oneway, "flags changed")
        let parameters2 = try codec.decodeParameters(P.self, from: again)
        precondition(same(parameters, parameters2), "\(P.methodName): \(parameters) became \(parameters2)")
    } catch {
        preconditionFailure("\(P.methodName) parameters \(parameters) do not round-trip: \(error)")
    }
}

/// Decodes the message as a reply to `P`'s method and round-trips the reply or the error it carries.
private func checkReply<P: VarlinkMethodCall>(_ type: P.Type, message: [UInt8]) {
    let reply: VarlinkReply<P.Reply>
    do throws(VarlinkProtocolError) {
        reply = try codec.decodeReply(P.Reply.self, from: message)
    } catch {
        _ = error.description
        return
    }
    do {
        switch reply {
        case .reply(let parameters, let continues):
            let again = unframed(try codec.encodeReply(parameters, continues: continues))
            guard case .reply(let parameters2, let continues2) = try codec.decodeReply(P.Reply.self, from: again)
            else { preconditionFailure("a re-encoded \(P.methodName) reply decoded as an error") }
            precondition(continues2 == continues, "continues changed in a round trip")
            precondition(same(parameters, parameters2), "\(P.methodName) reply: \(parameters) became \(parameters2)")
        case .error(let error):
            let again = unframed(try codec.encodeError(error))
            guard case .error(let error2) = try codec.decodeReply(P.Reply.self, from: again) else {
                preconditionFailure("a re-encoded error reply decoded as a reply")
            }
            precondition(error2 == error, "error reply \(error) became \(error2)")
            _ = error.description
            if let typed = LifecycleError(error) {
                precondition(LifecycleError(VarlinkError(typed)) == typed, "\(typed) does not round-trip")
            }
            if let typed = VarlinkServiceError(error) {
                precondition(VarlinkServiceError(VarlinkError(typed)) == typed, "\(typed) does not round-trip")
            }
        }
    } catch {
        preconditionFailure("a decoded \(P.methodName) reply does not round-trip: \(error)")
    }
}

/// Whatever `LeaseCallReader` reads, the tree parser reads as the same call, whose parameters decode to the same
/// values (or the same error) as every parameter type; and the daemon's codec refuses exactly what the tree's
/// refuses, with the same error.
private func checkLeaseReader(_ message: [UInt8]) {
    let viaTree = Result { () throws(VarlinkProtocolError) in try treeCodec.decodeCall(message) }
    let viaCodec = Result { () throws(VarlinkProtocolError) in try codec.decodeCall(message) }
    switch (viaTree, viaCodec) {
    case (.failure(let tree), .failure(let daemon)):
        precondition(tree == daemon, "the codecs refuse for different reasons: \(tree), \(daemon)")
    case (.success(let tree), .success(let daemon)):
        precondition(tree == daemon, "the codecs read different calls: \(tree), \(daemon)")
    default:
        preconditionFailure("one codec accepts what the other refuses: \(viaTree), \(viaCodec)")
    }
    guard let read = message.withUnsafeBytes({ LeaseCallReader.read($0) }) else { return }
    precondition(read.wasReadDirectly, "a call the reader read does not say so")
    guard case .success(let tree) = viaTree else { preconditionFailure("the reader read what the tree refuses") }
    precondition(read == tree, "the reader read \(read), the tree \(tree)")
    for type in parameterTypes {
        checkSameParameters(type, read: read, tree: tree)
    }
}

/// The parameters of `read` and of `tree` decode as `P` to the same value, or to the same error.
private func checkSameParameters<P: VarlinkMethodCall>(_ type: P.Type, read: DecodedCall, tree: DecodedCall) {
    let fromRead = Result { () throws(VarlinkError) in try codec.decodeParameters(P.self, of: read) }
    let fromTree = Result { () throws(VarlinkError) in try treeCodec.decodeParameters(P.self, of: tree) }
    switch (fromRead, fromTree) {
    case (.success(let lhs), .success(let rhs)):
        precondition(same(lhs, rhs), "\(P.methodName): the reader's \(lhs), the tree's \(rhs)")
    case (.failure(let lhs), .failure(let rhs)):
        precondition(lhs == rhs, "\(P.methodName): the reader's \(lhs), the tree's \(rhs)")
    default:
        preconditionFailure("\(P.methodName): the reader's \(fromRead), the tree's \(fromTree)")
    }
}

/// Checks that the server can send `error`: it encodes as one framed JSON message.
private func checkErrorEncodes(_ reply: VarlinkError) {
    do throws(VarlinkEncodingError) {
        let framed = try codec.encodeError(reply)
        precondition(framed.firstIndex(of: 0) == framed.count - 1, "an error reply is not one framed message")
    } catch {
        preconditionFailure("the error reply \(reply) cannot be encoded: \(error)")
    }
}

/// A framed message without its NUL, checking that the NUL is the only one.
private func unframed(_ framed: [UInt8]) -> [UInt8] {
    precondition(framed.last == 0 && framed.firstIndex(of: 0) == framed.count - 1, "bad framing")
    return Array(framed.dropLast())
}

/// Whatever the JSON parser accepts, written out again, parses to the same value; a refusal is a typed error.
private func checkParserRoundTrip(_ text: [UInt8]) {
    let value: JSONValue
    do throws(JSONParseError) {
        value = try JSONParser.parse(text)
    } catch {
        precondition(error.offset >= 0 && error.offset <= text.count, "an error offset outside the text: \(error)")
        return
    }
    do {
        let written = try JSONTextEncoder().encode(value)
        let again = try JSONParser.parse(written)
        precondition(again == value, "\(value) became \(again)")
    } catch {
        preconditionFailure("the parsed value \(value) does not round-trip: \(error)")
    }
}
