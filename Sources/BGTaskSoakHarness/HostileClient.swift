// The soak's hostile peer (`bgtask-soak hostile ...`): bounded floods and malformed input, in seeded order.

import BGTaskPOSIX
import BGTaskSeededRandom
import Glibc

/// Garbage, an oversized message, a pipelined flood it never reads the replies of, a connection burst and a
/// message cut off: each bounded, all within `--seconds`. The daemon must answer with errors or disconnect, and
/// go on serving everyone else.
public enum HostileClient {
    /// Runs with `--socket PATH --seed N --seconds S`; the exit status (0 whatever the daemon did).
    public static func run(arguments: [String]) -> Int32 {
        var socketPath: String?
        var seed: UInt64 = 1
        var seconds: UInt32 = 5
        var remaining = arguments[...]
        while let option = remaining.popFirst(), let value = remaining.popFirst() {
            switch option {
            case "--socket": socketPath = value
            case "--seed": seed = UInt64(value) ?? 1
            case "--seconds": seconds = UInt32(value) ?? 5
            default: return 64
            }
        }
        guard let socketPath else { return 64 }
        alarm(seconds + 5)
        signal(SIGPIPE, SIG_IGN)
        var random = SeededGenerator(seed: seed)
        let deadline = MonotonicClock.now() + Duration.seconds(Int64(seconds)).nanosecondCount
        var attacks: [(inout SeededGenerator) -> Void] = [
            { random in
                // Random bytes, NUL-terminated, on a burst of connections.
                for _ in 0..<30 {
                    guard let socket = try? UnixSocket.connect(path: socketPath) else { continue }
                    let bytes = (0..<Int.random(in: 1...512, using: &random)).map { _ in
                        UInt8.random(in: 1...255, using: &random)
                    }
                    try? socket.writeAll(bytes + [0])
                    try? socket.close()
                }
            },
            { _ in
                // A message past the 64 KiB limit, never terminated.
                guard let socket = try? UnixSocket.connect(path: socketPath) else { return }
                try? socket.writeAll([UInt8](repeating: UInt8(ascii: "a"), count: 100 * 1024))
                usleep(200_000)
                try? socket.close()
            },
            { _ in
                // Pipelined calls whose replies are never read.
                guard let socket = try? UnixSocket.connect(path: socketPath) else { return }
                try? socket.setNonBlocking()
                let call = Array("{\"method\":\"io.bgtask.Lifecycle.GetStatus\"}".utf8) + [0]
                for _ in 0..<2_000 { if (try? socket.writeAll(call)) == nil { break } }
                usleep(1_000_000)
                try? socket.close()
            },
            { _ in
                // Invalid UTF-8 and a call cut off mid-message, held open.
                guard let socket = try? UnixSocket.connect(path: socketPath) else { return }
                try? socket.writeAll([0x7B, 0x22, 0xFF, 0xFE, 0x22, 0x7D, 0])
                try? socket.writeAll(Array("{\"method\":\"io.bgtask.Lifecycle.Reg".utf8))
                usleep(1_000_000)
                try? socket.close()
            },
            { _ in
                // Connections opened and held, up to what the daemon allows per user.
                var held: [FileDescriptor] = []
                for _ in 0..<300 { if let socket = try? UnixSocket.connect(path: socketPath) { held.append(socket) } }
                usleep(500_000)
                for socket in held { try? socket.close() }
            },
        ]
        attacks.shuffle(using: &random)
        for attack in attacks where MonotonicClock.now() < deadline { attack(&random) }
        return 0
    }
}
