// Real Unix sockets: listen/accept/connect, stale socket files, peer credentials and peer pidfds.
import BGTaskPOSIX
import BGTaskTestSupport
import Glibc
import Testing

@Suite struct SocketTests {
    @Test func listenAcceptConnectAndPeerCredentialsOfThisProcess() async throws {
        try await offThePool {
            try withTemporaryDirectory { directory in
                let path = directory.path + "/bgtaskd.sock"
                let listener = try UnixSocket.listen(path: path, mode: 0o666)
                defer { try? listener.close() }
                var status = stat()
                #expect(lstat(path, &status) == 0)
                #expect(status.st_mode & S_IFMT == S_IFSOCK)
                #expect(status.st_mode & 0o777 == 0o666)
                #expect(try listener.isNonBlocking)
                #expect(try UnixSocket.accept(listener) == nil)

                let client = try UnixSocket.connect(path: path)
                defer { try? client.close() }
                #expect(try !client.isNonBlocking)
                #expect(try !listener.poll(for: .readable, timeout: .seconds(10)).isEmpty)
                let server = try #require(try UnixSocket.accept(listener))
                defer { try? server.close() }
                #expect(try server.isNonBlocking)
                #expect(try UnixSocket.accept(listener) == nil)

                let credentials = try UnixSocket.peerCredentials(of: server)
                #expect(credentials == PeerCredentials(pid: getpid(), uid: getuid(), gid: getgid()))

                try client.writeAll(Array("ping".utf8))
                #expect(try !server.poll(for: .readable, timeout: .seconds(10)).isEmpty)
                #expect(try server.read(upTo: 16) == Array("ping".utf8))
                #expect(shutdown(client.rawValue, Int32(SHUT_WR)) == 0)
                #expect(try server.poll(for: [.readable, .readHangUp], timeout: .seconds(10)).contains(.readHangUp))
                #expect(try server.read(upTo: 16).isEmpty)
            }
        }
    }

    @Test func peerOfAChildProcessHasTheChildsPidAndAPidfdThatSeesItExit() async throws {
        try await offThePool {
            try withTemporaryDirectory { directory in
                let path = directory.path + "/peer.sock"
                let listener = try UnixSocket.listen(path: path)
                defer { try? listener.close() }
                let script = """
                    import socket, sys
                    s = socket.socket(socket.AF_UNIX); s.settimeout(30); s.connect(sys.argv[1]); s.recv(1)
                    """
                try withChild([python, "-c", script, path]) { child in
                    #expect(try !listener.poll(for: .readable, timeout: .seconds(20)).isEmpty)
                    let server = try #require(try UnixSocket.accept(listener))
                    defer { try? server.close() }
                    let credentials = try UnixSocket.peerCredentials(of: server)
                    #expect(credentials.pid == child.pid)
                    #expect(credentials.uid == getuid())

                    let peer = try #require(try UnixSocket.peerPidFD(of: server))
                    defer { try? peer.close() }
                    #expect(peer.pid == child.pid)
                    // The kernel's own record of which process the pidfd names.
                    let fdinfo = try ProcFS().read("self/fdinfo/\(peer.fileDescriptor.rawValue)")
                    #expect(fdinfo.split(separator: "\n").contains("Pid:\t\(child.pid)"))
                    #expect(try !peer.hasExited)
                    try peer.sendSignal(.kill)
                    #expect(try peer.waitForExit(timeout: .seconds(10)))
                    #expect(try child.waitForExit() == .signaled(.kill))
                }
            }
        }
    }

    /// Run while a child of this process is held between its clone and its exec, with a copy of the listener: the
    /// tests beside this one spawn children, and the suite once met this by chance.
    @Test func staleSocketFileIsReplacedButALiveListenerIsNot() async throws {
        try await offThePool {
            try withTemporaryDirectory { directory in
                let path = directory.path + "/stale.sock"
                let first = try UnixSocket.listen(path: path)
                try withChildHeldBeforeExec { child in
                    #expect(try child.holdsCopy(of: first))
                    let error = #expect(throws: Errno.self) { try UnixSocket.listen(path: path) }
                    #expect(error == .addressInUse)
                    // Shut down, the listener refuses connections whoever holds a copy; closed alone, the child's
                    // copy would go on listening (the next test).
                    try UnixSocket.shutdown(first)
                    try first.close()  // The file stays behind, like after a crash.
                    var status = stat()
                    #expect(lstat(path, &status) == 0)
                    let second = try UnixSocket.listen(path: path)
                    defer { try? second.close() }
                    let client = try UnixSocket.connect(path: path)
                    try client.close()
                }
            }
        }
    }

    /// A listener lives while any process holds a copy of its descriptor, close-on-exec or not, and listening on its
    /// path is refused meanwhile: from its clone to its exec, a child holds a copy of every descriptor.
    @Test func aClosedListenerListensWhileAChildHoldsACopy() async throws {
        try await offThePool {
            try withTemporaryDirectory { directory in
                let path = directory.path + "/held.sock"
                let listener = try UnixSocket.listen(path: path)
                #expect(fcntl(listener.rawValue, F_GETFD) & FD_CLOEXEC != 0)
                try withChildHeldBeforeExec { child in
                    #expect(try child.holdsCopy(of: listener))
                    try listener.close()
                    #expect(throws: Errno.addressInUse) { try UnixSocket.listen(path: path) }
                }
            }
        }
    }

    @Test func aRegularFileAtThePathIsLeftAlone() async throws {
        try await offThePool {
            try withTemporaryDirectory { directory in
                let path = try directory.write("not-a-socket", "keep me")
                #expect(throws: Errno.addressInUse) { try UnixSocket.listen(path: path) }
                #expect(try ProcFS(root: directory.path).read("not-a-socket") == "keep me")
            }
        }
    }

    @Test func tooLongPathIsAClearError() async throws {
        await offThePool {
            let path = "/" + String(repeating: "x", count: UnixSocket.maximumPathLength)
            let error = #expect(throws: Errno.self) { try UnixSocket.listen(path: path) }
            #expect(error == .nameTooLong)
            #expect(error?.description.contains("the limit is \(UnixSocket.maximumPathLength)") == true)
            #expect(throws: Errno.nameTooLong) { try UnixSocket.connect(path: path) }
            #expect(throws: Errno.invalidArgument) { try UnixSocket.connect(path: "") }
            // The longest legal path gets past the length check (and fails later, for a missing directory).
            let longest = "/" + String(repeating: "y", count: UnixSocket.maximumPathLength - 1)
            #expect(throws: Errno.noSuchFileOrDirectory) { try UnixSocket.connect(path: longest) }
        }
    }

    @Test func socketPairCarriesBytesCredentialsAndBufferSizes() async throws {
        try await offThePool {
            let (first, second) = try UnixSocket.pair()
            defer {
                try? first.close()
                try? second.close()
            }
            #expect(try UnixSocket.peerCredentials(of: second).pid == getpid())
            try first.writeAll(Array("hello".utf8))
            #expect(try second.read(upTo: 5) == Array("hello".utf8))

            let requested: Int32 = 256 * 1024
            try UnixSocket.setSendBufferSize(first, bytes: requested)
            try UnixSocket.setReceiveBufferSize(first, bytes: requested)
            // Linux doubles the value for its own bookkeeping, capped by wmem_max/rmem_max (root may exceed).
            #expect(try UnixSocket.sendBufferSize(first) >= requested)
            #expect(try UnixSocket.receiveBufferSize(first) >= requested)
        }
    }
}

@Suite struct DatagramSocketTests {
    @Test func notifyMessagesArriveOnABoundDatagramSocket() async throws {
        try await offThePool {
            try withTemporaryDirectory { directory in
                let path = directory.path + "/notify"
                let socket = try UnixSocket.bindDatagram(path: path)
                defer { try? socket.close() }
                // A real sender speaking the sd_notify protocol: systemd-notify in a child with NOTIFY_SOCKET set.
                let child = try ProcessSpawner.spawn(
                    ["systemd-notify", "--no-block", "STATUS=hello from a child"],
                    options: SpawnOptions(environment: ["NOTIFY_SOCKET=\(path)", "PATH=/usr/bin:/bin"]))
                defer { try? child.pidFD.close() }
                let ready = try socket.poll(for: .readable, timeout: .seconds(10))
                #expect(ready.contains(.readable))
                let message = String(decoding: try socket.read(upTo: 4096), as: UTF8.self)
                #expect(message.contains("STATUS=hello from a child"))
                _ = try child.waitForExit()
                #expect(throws: Errno.self) { try UnixSocket.bindDatagram(path: path) }
            }
        }
    }
}

@Suite struct NoSignalSendTests {
    @Test func sendingToAClosedPeerFailsWithEPIPEInsteadOfKillingTheProcess() async throws {
        try await offThePool {
            let (local, remote) = try UnixSocket.pair()
            defer { try? local.close() }
            try local.sendAll(Array("hello".utf8))
            #expect(try remote.read(upTo: 16) == Array("hello".utf8))
            try remote.close()
            // With write(2) this would raise SIGPIPE and end the test process.
            #expect(throws: Errno(rawValue: EPIPE)) { try local.sendAll([1, 2, 3]) }
        }
    }
}

@Suite struct PeerGroupTests {
    @Test func peerGroupsAreTheConnectingProcesssSupplementaryGroups() async throws {
        try await offThePool {
            let (local, remote) = try UnixSocket.pair()
            defer {
                try? local.close()
                try? remote.close()
            }
            let count = getgroups(0, nil)
            var own = [gid_t](repeating: 0, count: Int(max(count, 0)))
            _ = getgroups(count, &own)
            #expect(Set(try UnixSocket.peerGroups(of: local)) == Set(own))
        }
    }

    @Test func aProcessRunWithOtherGroupsIsSeenWithThem() async throws {
        try await offThePool {
            try withTemporaryDirectory { directory in
                let path = directory.path + "/groups.sock"
                let listener = try UnixSocket.listen(path: path)
                defer { try? listener.close() }
                chmod(directory.path, 0o755)
                // A real process with chosen groups, connecting as them (the system python: nobody can run it).
                try withChild([
                    "setpriv", "--reuid=65534", "--regid=65534", "--groups=4242,4343", "/usr/bin/python3", "-c",
                    "import socket,sys,time; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); time.sleep(20)",
                    path,
                ]) { _ in
                    _ = try listener.poll(for: .readable, timeout: .seconds(20))
                    let accepted = try #require(try UnixSocket.accept(listener))
                    defer { try? accepted.close() }
                    #expect(Set(try UnixSocket.peerGroups(of: accepted)) == [4242, 4343])
                    #expect(try UnixSocket.peerCredentials(of: accepted).uid == 65534)
                }
            }
        }
    }
}
