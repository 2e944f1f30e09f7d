// Copies of the built executables that tests run from a directory of their own (as another user, or alone).
import BGTaskPOSIX
import BGTaskTestSupport
import Glibc
import Testing

@Suite("Copies of the built executables")
struct ExecutableCopyTests {
    /// Why `Products.copy` leaves the writing to `cp`: a child cloned while this process has the copy open for
    /// writing holds that descriptor until its exec, and the kernel refuses to run the copy meanwhile. (Whether the
    /// file runs once the held child is gone is not asked: a child another test clones while the descriptor was
    /// open may still hold it, which is the very race `Products.copy` avoids.)
    @Test("a file this process is writing cannot be run while a child cloned meanwhile holds it (ETXTBSY)")
    func writerHeldByAChildRefusesExec() async throws {
        try await offThePool {
            try withTemporaryDirectory { directory in
                let path = directory.path + "/true"
                let program = try FileDescriptor.open(
                    path, .writeOnly, options: [.create, .truncate], permissions: 0o755)
                let bytes = try FileDescriptor.open("/bin/true", .readOnly)
                try program.writeAll(try bytes.closeAfter { try bytes.readToEnd(limit: .max) })
                try withChildHeldBeforeExec { child in
                    #expect(try child.holdsCopy(of: program))
                    try program.close()
                    let refusal = #expect(throws: Errno.self) { _ = try ProcessSpawner.spawn([path]) }
                    #expect(refusal?.rawValue == ETXTBSY, "\(String(describing: refusal))")
                }
            }
        }
    }

    @Test("a copy made by Products.copy runs while a child of this process is between its clone and exec")
    func copyRunsBesideAHeldChild() async throws {
        try await offThePool {
            try withTemporaryDirectory { directory in
                try withChildHeldBeforeExec { _ in
                    try Products.copy("BGTaskLaunchProbe", into: directory.path)
                    let spawned = try ProcessSpawner.spawn([directory.path + "/BGTaskLaunchProbe"])
                    defer { try? spawned.pidFD.close() }
                    _ = try spawned.waitForExit()
                }
            }
        }
    }
}
