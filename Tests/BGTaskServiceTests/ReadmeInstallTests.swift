// The README's "Install as a service" commands for one user, run as written against a contained systemd user
// manager whose data directory is where the install puts the units (as /usr/local/lib/systemd/user is for a
// real user manager).

import BGTaskPOSIX
import BGTaskTestSupport
import Foundation
import Testing

@Suite("The README's install commands", .serialized, .requires(.containedSystemd))
struct ReadmeInstallTests {
    @Test("install, daemon-reload, enable --now bgtaskd.socket: bgtask --user status answers through the socket")
    func userInstall() async throws {
        try await offThePool {
            let systemd = try ContainedSystemd(dataHome: "prefix/lib")
            defer { systemd.close() }
            // `./scripts/install`, into a prefix whose lib/systemd/user is on this manager's search path, from the
            // binaries built for the tests (the README's command builds them first).
            let prefix = systemd.directory.path + "/prefix"
            try InstalledUserService.install(prefix: prefix)
            // The README's systemctl commands, as written.
            try systemd.systemctlSucceeding(["daemon-reload"])
            try systemd.systemctlSucceeding(["enable", "--now", "bgtaskd.socket"])
            #expect(
                FileManager.default.fileExists(
                    atPath: systemd.configHome + "/systemd/user/sockets.target.wants/bgtaskd.socket"),
                "enable made no link")
            #expect(try systemd.show("bgtaskd.socket", ["ActiveState"])["ActiveState"] == "active")
            #expect(try systemd.show("bgtaskd.service", ["ActiveState"])["ActiveState"] == "inactive")
            // `bgtask --user status`: the first connection starts the daemon, which answers.
            var environment = systemd.environment
            environment["BGTASK_SOCKET"] = ""
            let (status, text) = try runProgram([prefix + "/bin/bgtask", "--user", "status"], environment: environment)
            #expect(status == 0, "\(text)")
            #expect(text.contains("bgtaskd"), "\(text)")
            #expect(try systemd.show("bgtaskd.service", ["ActiveState"])["ActiveState"] == "active")
            // Uninstalling removes what the install put there.
            try systemd.systemctlSucceeding(["disable", "--now", "bgtaskd.socket", "bgtaskd.service"])
            try InstalledUserService.run([Products.packageRoot + "/scripts/install", "--prefix", prefix, "--uninstall"])
            #expect(!FileManager.default.fileExists(atPath: prefix + "/bin/bgtaskd"))
            #expect(!FileManager.default.fileExists(atPath: prefix + "/lib/systemd/user/bgtaskd.socket"))
        }
    }
}
