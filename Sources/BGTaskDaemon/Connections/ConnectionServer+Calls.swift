// A client's message turned into a call for the daemon's method table, or answered with the Varlink error that
// says why it is not one.

import BGTaskCore
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSystem

/// One call being answered.
struct IncomingCall {
    /// The call, read once: its header, and its parameters, already typed for a lease call (`LeaseCallReader`),
    /// else as a JSON tree the method's type is decoded from.
    let decoded: DecodedCall
    let connection: ClientConnection
    /// Whether the method changes what the state file holds: its reply waits until that is saved.
    var changesState = false
    var header: VarlinkCallHeader { decoded.header }
    var credentials: PeerCredentials { connection.credentials }
}

extension ConnectionServer {
    /// Handles one complete message from a client. A message that is not a well-formed call gets
    /// `InvalidMessage` and the connection stays usable: the NUL framing is intact, so the next call is still
    /// found (only a framing error, an oversized message, closes it). A call of a method the daemon answers goes to
    /// the host's method table.
    func handle(_ message: [UInt8], from connection: ClientConnection) {
        guard let host else { return }
        let decoded: DecodedCall
        do {
            decoded = try codec.decodeCall(message)
        } catch {
            if connection.loggedLimits.insert("InvalidMessage").inserted {
                logger.info(
                    "invalid message from pid \(connection.credentials.pid) uid \(connection.credentials.uid): "
                        + "\(error) (further ones from this connection are not logged)")
            }
            answer(.invalidMessage(reason: error.description), on: connection, isOneway: false, host: host)
            return
        }
        let header = decoded.header
        logger.debug(
            "call \(header.method.qualified) from pid \(connection.credentials.pid) uid \(connection.credentials.uid)"
                + " on connection \(connection.serial)")
        guard !header.upgrade else {
            let error = VarlinkError.methodNotImplemented(method: header.method.qualified)
            answer(error, on: connection, isOneway: header.oneway, host: host)
            return
        }
        guard let method = CallableMethod(header.method) else {
            let error: VarlinkError =
                switch header.method.interface {
                case VarlinkServiceInterface.name, LifecycleInterface.name:
                    .methodNotFound(method: header.method.qualified)
                default:
                    .interfaceNotFound(interface: header.method.interface)
                }
            answer(error, on: connection, isOneway: header.oneway, host: host)
            return
        }
        if method.requiresMore && !header.more {
            answer(.expectedMore(), on: connection, isOneway: header.oneway, host: host)
            return
        }
        host.dispatch(IncomingCall(decoded: decoded, connection: connection), to: method)
    }

    /// Answers a message that is no call the daemon serves with its error (none to a oneway call); it reflects no
    /// change, so it waits only for what went before it on the connection.
    private func answer(
        _ error: VarlinkError, on connection: ClientConnection, isOneway: Bool, host: any ConnectionServerHost
    ) {
        guard !isOneway else { return }
        do {
            host.transmit(try codec.encodeError(error), on: connection, reflectsChange: false)
        } catch {
            connection.close(because: "internal error encoding an error")
        }
    }
}
