// A one-call Varlink tool for tests: sends the JSON given as an argument to a socket and prints the reply.
// Used to make calls from another uid (run under setpriv), where Python's packages may not be reachable.

import BGTaskPOSIX
import Glibc

let arguments = CommandLine.arguments
guard arguments.count == 3 else {
    try? FileDescriptor.standardError.writeAll(Array("usage: BGTaskRawCall SOCKET JSON-CALL\n".utf8))
    exit(64)
}
do {
    let socket = try UnixSocket.connect(path: arguments[1])
    try socket.writeAll(Array(arguments[2].utf8) + [0])
    var reply: [UInt8] = []
    while !reply.contains(0) {
        guard !(try socket.poll(for: .readable, timeout: .seconds(10))).isEmpty else { break }
        let chunk = try socket.read(upTo: 65536)
        if chunk.isEmpty { break }
        reply += chunk
    }
    print(String(decoding: reply.prefix { $0 != 0 }, as: UTF8.self))
} catch {
    try? FileDescriptor.standardError.writeAll(Array("BGTaskRawCall: \(error)\n".utf8))
    exit(2)
}
