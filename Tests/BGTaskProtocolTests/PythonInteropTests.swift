// End-to-end interop: Python's varlink client talks over a real Unix socket to a fake daemon built from this module.
import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

/// A failed socket call, with the call's name and errno.
private struct SocketError: Error, CustomStringConvertible {
    var call: String
    var code: Int32
    var description: String { "\(call): \(String(cString: strerror(code)))" }
}

/// A listening Unix stream socket at `path`, in a fresh temporary directory removed by `close()`.
private struct Listener {
    var fd: Int32
    var path: String
    var directory: URL

    init() throws {
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("bgtask-protocol-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        path = directory.appendingPathComponent("socket").path
        fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SocketError(call: "socket", code: errno) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw SocketError(call: "bind (path too long)", code: ENAMETOOLONG)
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let bound = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                bind(fd, socketAddress, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard bound == 0 else { throw SocketError(call: "bind", code: errno) }
        guard listen(fd, 16) == 0 else { throw SocketError(call: "listen", code: errno) }
    }

    func close() {
        _ = Glibc.close(fd)
        try? FileManager.default.removeItem(at: directory)
    }
}

/// Writes all of `data` to a blocking socket; replies are small, so this never waits long.
private func writeAll(_ fd: Int32, _ data: [UInt8]) throws {
    try data.withUnsafeBytes { (bytes: UnsafeRawBufferPointer) in
        var offset = 0
        while offset < bytes.count {
            let written = write(fd, bytes.baseAddress! + offset, bytes.count - offset)  // non-empty: offset < count
            if written < 0 {
                if errno == EINTR { continue }
                throw SocketError(call: "write", code: errno)
            }
            offset += written
        }
    }
}

/// The daemon's side of the protocol with canned answers: what the real dispatcher does, minus the policy.
private struct FakeDaemon {
    let codec = VarlinkCodec()
    /// Every call received, by qualified method name, in order.
    var calls: [String] = []

    /// The replies to one message, or nil when the connection must be closed.
    mutating func handle(_ message: [UInt8]) -> [[UInt8]]? {
        let header: VarlinkCallHeader
        do {
            header = try codec.decodeCallHeader(message)
        } catch {
            return nil
        }
        calls.append(header.method.qualified)
        let replies: [[UInt8]]
        do {
            replies = try answer(header, message)
        } catch let error as VarlinkError {
            replies = [encodeError(error)]
        } catch {
            Issue.record("fake daemon failed: \(error)")
            return nil
        }
        return header.oneway ? [] : replies
    }

    private func encodeError(_ error: VarlinkError) -> [UInt8] {
        do {
            return try codec.encodeError(error)
        } catch {
            Issue.record("cannot encode \(error)")
            return []
        }
    }

    private func answer(_ header: VarlinkCallHeader, _ message: [UInt8]) throws -> [[UInt8]] {
        if let method = VarlinkServiceMethod(header.method) {
            switch method {
            case .getInfo:
                return [try codec.encodeReply(GetInfoReply.bgtaskd(version: "test"))]
            case .getInterfaceDescription:
                let parameters = try codec.decodeParameters(GetInterfaceDescriptionParameters.self, from: message)
                guard let reply = GetInterfaceDescriptionReply.bgtaskd(interface: parameters.interface) else {
                    throw VarlinkError.interfaceNotFound(interface: parameters.interface)
                }
                return [try codec.encodeReply(reply)]
            }
        }
        guard let method = LifecycleMethod(header.method) else {
            if header.method.interface == LifecycleInterface.name {
                throw VarlinkError.methodNotFound(method: header.method.qualified)
            }
            throw VarlinkError.interfaceNotFound(interface: header.method.interface)
        }
        if method.requiresMore && !header.more { throw VarlinkError.expectedMore() }
        switch method {
        case .register:
            let parameters = try codec.decodeParameters(RegisterParameters.self, from: message)
            let app = AppInfo(
                name: parameters.name, state: parameters.state ?? .active, pid: 1, uid: 0, managed: false
            )
            return [
                try codec.encodeReply(RegisterReply(app: app), continues: true),
                try codec.encodeReply(RegisterReply(event: Samples.minimalEvent), continues: true),
                try codec.encodeReply(RegisterReply(event: Samples.fullEvent)),
            ]
        case .beginBackgroundTask:
            _ = try codec.decodeParameters(BeginBackgroundTaskParameters.self, from: message)
            return [try codec.encodeReply(BeginBackgroundTaskReply(taskId: 7))]
        case .endBackgroundTask:
            let parameters = try codec.decodeParameters(EndBackgroundTaskParameters.self, from: message)
            throw VarlinkError.noSuchTask(app: parameters.app, taskId: parameters.taskId)
        case .getApp:
            let parameters = try codec.decodeParameters(GetAppParameters.self, from: message)
            guard parameters.app == Samples.minimalApp.name else { throw VarlinkError.noSuchApp(app: parameters.app) }
            return [try codec.encodeReply(GetAppReply(app: Samples.minimalApp))]
        default:
            throw VarlinkError.methodNotImplemented(method: method.qualifiedName)
        }
    }
}

struct PythonInteropTests {
    static let script = """
        import json, sys, varlink

        def error(call):
            try:
                call()
            except varlink.VarlinkError as e:
                return {"error": e.error(), "parameters": e.parameters()}
            return None

        out = {}
        with varlink.Client.new_with_address("unix:" + sys.argv[1]) as client:
            out["interfaces"] = client.get_interfaces()
            out["info"] = client.info
            with client.open("io.bgtask.Lifecycle") as con:
                out["begin"] = con.BeginBackgroundTask("org.example.py", "upload")
                out["app"] = con.GetApp("org.example.clock")
                out["missing"] = error(lambda: con.GetApp("org.example.missing"))
                out["end"] = error(lambda: con.EndBackgroundTask("org.example.py", 99))
                out["register"] = list(con.Register("org.example.py", None, "background", _more=True))
                out["watch"] = error(lambda: con.Watch())
            out["other"] = error(lambda: client.open("org.example.Other"))
        print(json.dumps(out))
        """

    @Test func pythonClientUsesTheFakeDaemon() async throws {
        try await offThePool {
            let listener = try Listener()
            defer { listener.close() }
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            // The child bounds its own lifetime; the loop below bounds it again and reaps it.
            process.arguments = ["timeout", "30", "python3", "-c", PythonInteropTests.script, listener.path]
            let stdout = Pipe()
            let stderr = Pipe()
            process.standardOutput = stdout
            process.standardError = stderr
            try process.run()
            defer { if process.isRunning { process.terminate() } }

            var daemon = FakeDaemon()
            var connections: [Int32: VarlinkFrameDecoder] = [:]
            let deadline = ContinuousClock.now + .seconds(30)
            while process.isRunning && ContinuousClock.now < deadline {
                var descriptors = [pollfd(fd: listener.fd, events: Int16(POLLIN), revents: 0)]
                descriptors += connections.keys.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
                // Wake at least every 100 ms to notice the child's exit.
                let ready = poll(&descriptors, nfds_t(descriptors.count), 100)
                if ready < 0 && errno != EINTR { throw SocketError(call: "poll", code: errno) }
                for descriptor in descriptors where descriptor.revents != 0 {
                    if descriptor.fd == listener.fd {
                        // Close-on-exec from the start (accept4), then blocking, as the writes below expect.
                        guard let connection = try UnixSocket.accept(FileDescriptor(rawValue: listener.fd)) else {
                            continue  // The client gave up before it was accepted.
                        }
                        try connection.setNonBlocking(false)
                        connections[connection.rawValue] = VarlinkFrameDecoder()
                        continue
                    }
                    var buffer = [UInt8](repeating: 0, count: 4096)
                    let count = read(descriptor.fd, &buffer, buffer.count)
                    guard count > 0, var decoder = connections[descriptor.fd] else {
                        _ = close(descriptor.fd)
                        connections[descriptor.fd] = nil
                        continue
                    }
                    decoder.append(contentsOf: buffer[..<count])
                    var isOpen = true
                    while isOpen, let message = try decoder.nextMessage() {
                        guard let replies = daemon.handle(message) else {
                            isOpen = false
                            break
                        }
                        for reply in replies { try writeAll(descriptor.fd, reply) }
                    }
                    if isOpen {
                        connections[descriptor.fd] = decoder
                    } else {
                        _ = close(descriptor.fd)
                        connections[descriptor.fd] = nil
                    }
                }
            }
            for fd in connections.keys { _ = close(fd) }
            process.waitUntilExit()
            let output = stdout.fileHandleForReading.readDataToEndOfFile()
            let errors = String(decoding: stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            try #require(process.terminationStatus == 0, "python: \(errors)")

            let python = try JSONDecoder().decode(JSONValue.self, from: output)
            // Python's client drops null fields from replies, so compare against our encoding with nulls removed.
            func expected<R: Encodable>(_ reply: R) throws -> JSONValue {
                try #require(jsonValue(ofFramed: VarlinkCodec().encodeReply(reply))["parameters"]).withoutNulls
            }
            #expect(python["interfaces"] == ["org.varlink.service", "io.bgtask.Lifecycle"])
            #expect(python["info"] == (try expected(GetInfoReply.bgtaskd(version: "test"))))
            #expect(python["begin"] == ["taskId": 7])
            #expect(python["app"] == (try expected(GetAppReply(app: Samples.minimalApp))))
            #expect(
                python["missing"] == [
                    "error": "io.bgtask.Lifecycle.NoSuchApp", "parameters": ["app": "org.example.missing"],
                ])
            #expect(
                python["end"] == [
                    "error": "io.bgtask.Lifecycle.NoSuchTask", "parameters": ["app": "org.example.py", "taskId": 99],
                ])
            let app = AppInfo(name: "org.example.py", state: .background, pid: 1, uid: 0, managed: false)
            #expect(
                python["register"]
                    == .array([
                        try expected(RegisterReply(app: app)), try expected(RegisterReply(event: Samples.minimalEvent)),
                        try expected(RegisterReply(event: Samples.fullEvent)),
                    ]))
            #expect(python["watch"] == ["error": "org.varlink.service.ExpectedMore", "parameters": [:]])
            #expect(
                python["other"] == [
                    "error": "org.varlink.service.InterfaceNotFound", "parameters": ["interface": "org.example.Other"],
                ])
            #expect(
                daemon.calls == [
                    "org.varlink.service.GetInfo", "org.varlink.service.GetInterfaceDescription",
                    "io.bgtask.Lifecycle.BeginBackgroundTask", "io.bgtask.Lifecycle.GetApp",
                    "io.bgtask.Lifecycle.GetApp",
                    "io.bgtask.Lifecycle.EndBackgroundTask", "io.bgtask.Lifecycle.Register",
                    "io.bgtask.Lifecycle.Watch",
                    "org.varlink.service.GetInterfaceDescription",
                ])
        }
    }
}

extension JSONValue {
    /// The value with null object members removed, recursively, as Python's varlink client returns replies.
    var withoutNulls: JSONValue {
        switch self {
        case .object(let members):
            .object(
                members.compactMapValues { (member: JSONValue) -> JSONValue? in
                    member == .null ? nil : member.withoutNulls
                })
        case .array(let elements): .array(elements.map(\.withoutNulls))
        default: self
        }
    }
}
