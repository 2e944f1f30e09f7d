// Socket path resolution: the order of sources, the per-user directory, and hostile environments.
import BGTaskClient
import Testing

/// One row: the inputs and the path expected, or nil when resolution must fail with `.runtimeDirectoryUnset`.
struct SocketPathCase: Sendable, CustomStringConvertible {
    var name: String
    var explicit: String?
    var user: Bool
    var environment: [String: String]
    var expected: String?

    var description: String { name }
}

@Suite struct DaemonSocketTests {
    static let cases: [SocketPathCase] = [
        SocketPathCase(
            name: "system default", explicit: nil, user: false, environment: [:],
            expected: "/run/bgtaskd/io.bgtask.Lifecycle"),
        SocketPathCase(
            name: "explicit wins over everything", explicit: "/srv/app/x.sock", user: true,
            environment: ["BGTASK_SOCKET": "/env.sock", "XDG_RUNTIME_DIR": "/run/user/1000"],
            expected: "/srv/app/x.sock"),
        SocketPathCase(
            name: "relative explicit path is kept as given", explicit: "sock", user: false,
            environment: [:], expected: "sock"),
        SocketPathCase(
            name: "BGTASK_SOCKET over user", explicit: nil, user: true,
            environment: ["BGTASK_SOCKET": "/env.sock", "XDG_RUNTIME_DIR": "/run/user/1000"],
            expected: "/env.sock"),
        SocketPathCase(
            name: "BGTASK_SOCKET over system", explicit: nil, user: false,
            environment: ["BGTASK_SOCKET": "/env.sock"], expected: "/env.sock"),
        SocketPathCase(
            name: "user socket in XDG_RUNTIME_DIR", explicit: nil, user: true,
            environment: ["XDG_RUNTIME_DIR": "/run/user/1000"],
            expected: "/run/user/1000/bgtaskd/io.bgtask.Lifecycle"),
        SocketPathCase(
            name: "trailing slashes of XDG_RUNTIME_DIR dropped", explicit: nil, user: true,
            environment: ["XDG_RUNTIME_DIR": "/run/user/1000//"],
            expected: "/run/user/1000/bgtaskd/io.bgtask.Lifecycle"),
        SocketPathCase(
            name: "XDG_RUNTIME_DIR of /", explicit: nil, user: true,
            environment: ["XDG_RUNTIME_DIR": "/"], expected: "/bgtaskd/io.bgtask.Lifecycle"),
        SocketPathCase(
            name: "XDG_RUNTIME_DIR ignored without user", explicit: nil, user: false,
            environment: ["XDG_RUNTIME_DIR": "/run/user/1000"],
            expected: "/run/bgtaskd/io.bgtask.Lifecycle"),
        // Hostile rows.
        SocketPathCase(
            name: "empty explicit counts as unset", explicit: "", user: false,
            environment: ["BGTASK_SOCKET": "/env.sock"], expected: "/env.sock"),
        SocketPathCase(
            name: "empty BGTASK_SOCKET counts as unset", explicit: nil, user: false,
            environment: ["BGTASK_SOCKET": ""], expected: "/run/bgtaskd/io.bgtask.Lifecycle"),
        SocketPathCase(
            name: "user without XDG_RUNTIME_DIR fails", explicit: nil, user: true, environment: [:],
            expected: nil),
        SocketPathCase(
            name: "user with empty XDG_RUNTIME_DIR fails", explicit: nil, user: true,
            environment: ["XDG_RUNTIME_DIR": ""], expected: nil),
        SocketPathCase(
            name: "user with relative XDG_RUNTIME_DIR fails (XDG says ignore it)", explicit: nil,
            user: true, environment: ["XDG_RUNTIME_DIR": "run/user/1000"], expected: nil),
        SocketPathCase(
            name: "user without XDG_RUNTIME_DIR but with BGTASK_SOCKET", explicit: nil, user: true,
            environment: ["BGTASK_SOCKET": "/env.sock"], expected: "/env.sock"),
    ]

    @Test(arguments: cases)
    func resolves(_ row: SocketPathCase) {
        do {
            let path = try DaemonSocket.path(explicit: row.explicit, user: row.user, environment: row.environment)
            #expect(path == row.expected, "\(row.name)")
        } catch {
            #expect(row.expected == nil, "\(row.name): unexpected \(error)")
            #expect(error == .runtimeDirectoryUnset)
            #expect(error.description.contains("XDG_RUNTIME_DIR"))
            #expect(error.description.contains("--socket"))
        }
    }

    @Test func socketIsNamedAfterTheInterface() {
        #expect(DaemonSocket.systemPath.hasSuffix("/" + LifecycleInterface.name))
    }
}
