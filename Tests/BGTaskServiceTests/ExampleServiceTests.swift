// The example of a systemd-managed client (Examples/systemd/photo-backup.service) run under a contained manager,
// next to the installed user bgtaskd: its lease lasts exactly as long as its job.

import BGTaskPOSIX
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

@Suite("The example systemd-managed client", .serialized, .requires(.containedSystemd))
struct ExampleServiceTests {
    @Test("its task shows in bgtask apps while the job runs, ends `ended` with the job, and ends with a stop")
    func leaseLastsAsLongAsTheJob() async throws {
        try await offThePool {
            let service = try InstalledUserService()
            defer { service.close() }
            let systemd = service.systemd
            // The unit as shipped, with bgtask where the test installed it; its job, through the BACKUP variable
            // the unit documents, is a script that runs until the test lets it finish (at most two minutes).
            let shipped = try String(
                contentsOfFile: Products.packageRoot + "/Examples/systemd/photo-backup.service", encoding: .utf8)
            #expect(shipped.contains("ExecStart=/usr/local/bin/bgtask "))
            _ = try systemd.directory.write(
                "run/systemd/user/photo-backup.service",
                shipped.replacingOccurrences(of: "/usr/local/bin/", with: service.prefix + "/bin/"))
            let finish = systemd.directory.path + "/finish"
            let job = try systemd.directory.write(
                "job.sh",
                """
                for _ in $(seq 1200); do
                    [ -e \(finish) ] && exit 0
                    sleep 0.1
                done
                exit 1
                """)
            _ = try systemd.directory.write(
                "run/systemd/user/photo-backup.service.d/test.conf",
                "[Service]\nEnvironment=\"BACKUP=/bin/sh \(job)\"\n")
            try systemd.systemctlSucceeding(["daemon-reload"])

            // Runs to its end: the task shows while it runs, and ends `ended`.
            try systemd.systemctlSucceeding(["start", "photo-backup.service"])
            let first = try waitForTask(of: service)
            #expect(try isActive(service))
            _ = try systemd.directory.write("finish", "")
            try systemd.waitFor("photo-backup.service", ["ActiveState", "Result"], what: "the job to finish") {
                $0["ActiveState"] == "inactive"
            }
            #expect(try systemd.show("photo-backup.service", ["Result"])["Result"] == "success")
            #expect(
                eventually { service.log.contains("org.example.photo-backup task \(first) ended (ended)") },
                "the task did not end `ended`:\n\(service.log)")
            #expect(try apps(of: service, all: false).isEmpty)

            // Stopped early: the lease ends with the job.
            unlink(finish)
            try systemd.systemctlSucceeding(["start", "photo-backup.service"])
            let second = try waitForTask(of: service)
            #expect(second != first)
            try systemd.systemctlSucceeding(["stop", "photo-backup.service"])
            #expect(
                eventually { service.log.contains("org.example.photo-backup task \(second) ended (app-ended)") },
                "the stop did not end the lease:\n\(service.log)")
            #expect(eventually { (try? apps(of: service, all: false).isEmpty) == true })
        }
    }

    /// The apps `bgtask apps --json` (the installed CLI, through the socket unit) lists.
    private func apps(of service: InstalledUserService, all: Bool) throws -> [[String: Any]] {
        let (status, output) = try runProgram(
            [service.prefix + "/bin/bgtask", "--socket", service.socketPath, "apps", "--json"] + (all ? ["--all"] : []))
        guard status == 0, let reply = try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any],
            let apps = reply["apps"] as? [[String: Any]]
        else { throw HarnessError("bgtask apps failed: \(output)") }
        return apps
    }

    /// Waits until `bgtask apps` shows the example's app with one task, and returns the task's id.
    private func waitForTask(of service: InstalledUserService) throws -> Int {
        var taskID: Int?
        let found = try eventually(timeout: .seconds(30)) {
            let app = try apps(of: service, all: false).first { $0["name"] as? String == "org.example.photo-backup" }
            guard let tasks = app?["tasks"] as? [[String: Any]], tasks.count == 1 else { return false }
            #expect(app?["state"] as? String == "background")
            #expect(tasks[0]["name"] as? String == "backup")
            taskID = tasks[0]["id"] as? Int
            return true
        }
        guard found, let taskID else { throw HarnessError("the job's task never showed:\n\(service.log)") }
        return taskID
    }

    /// Whether the example's unit is active.
    private func isActive(_ service: InstalledUserService) throws -> Bool {
        try service.systemd.show("photo-backup.service", ["ActiveState"])["ActiveState"] == "active"
    }
}
