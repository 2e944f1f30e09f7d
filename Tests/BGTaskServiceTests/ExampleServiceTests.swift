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

@Suite("The example scheduled backup", .serialized, .requires(.containedSystemd))
struct ScheduledBackupExampleTests {
    @Test(
        "bgtask run --when ac in the backup example: waits on battery, runs when plugged, is sent SIGTERM when unplugged; run again, completes"
    )
    func waitsRunsAndIsExpiredOnUnplug() async throws {
        try await offThePool {
            let tree = try FakePowerSupplies()
            try tree.set("AC", ["type": "Mains", "online": "0"])
            let scratch = try ScratchDirectory(prefix: "backup-example")
            // The daemon reads power from the test's tree: no UPower can answer on a bus that does not exist.
            let service = try InstalledUserService(
                configuration: "[Conditions]\nPowerSupplyPath=\(tree.path)\n",
                serviceSettings: "Environment=DBUS_SYSTEM_BUS_ADDRESS=unix:path=\(scratch.path)/no-bus\n")
            defer { service.close() }
            let systemd = service.systemd
            for file in ["backup-on-ac.service", "backup-on-ac.timer"] {
                let shipped = try String(
                    contentsOfFile: Products.packageRoot + "/Examples/systemd/" + file, encoding: .utf8)
                _ = try systemd.directory.write(
                    "run/systemd/user/" + file,
                    shipped.replacingOccurrences(of: "/usr/local/bin/", with: service.prefix + "/bin/"))
            }
            // The job says when it starts and when SIGTERM reaches it, and runs until the test lets it finish (at
            // most two minutes). The conditions, through the WHEN variable the unit documents: ac alone, the one
            // this test controls.
            let marks = systemd.directory.path
            let job = try systemd.directory.write(
                "job.sh",
                """
                echo started >> \(marks)/started
                trap 'echo terminated > \(marks)/terminated; exit 143' TERM
                for _ in $(seq 1200); do
                    [ -e \(marks)/finish ] && exit 0
                    sleep 0.1
                done
                exit 1
                """)
            _ = try systemd.directory.write(
                "run/systemd/user/backup-on-ac.service.d/test.conf",
                "[Service]\nEnvironment=WHEN=ac\nEnvironment=\"BACKUP=/bin/sh \(job)\"\n")
            try systemd.systemctlSucceeding(["daemon-reload"])
            let timer = try systemd.show("backup-on-ac.timer", ["LoadState", "Triggers"])
            #expect(timer["LoadState"] == "loaded" && timer["Triggers"] == "backup-on-ac.service", "\(timer)")

            // On battery it waits: the unit runs, its request waits for ac, and the job has not started.
            try systemd.systemctlSucceeding(["start", "backup-on-ac.service"])
            let waiting = try waitForRequest(of: service) { $0["state"] as? String == "pending" }
            #expect(waiting["waitingOn"] as? [String] == ["ac"] && waiting["kind"] as? String == "processing")
            #expect(try systemd.show("backup-on-ac.service", ["ActiveState"])["ActiveState"] == "active")
            #expect(!FileManager.default.fileExists(atPath: marks + "/started"))

            // Plugged: the job runs as the request's task.
            try tree.set("AC", ["online": "1"])
            #expect(
                eventually(timeout: .seconds(30)) { FileManager.default.fileExists(atPath: marks + "/started") },
                "the job never started:\n\(service.log)")
            let running = try waitForRequest(of: service) { $0["state"] as? String == "running" }
            let task = try #require(running["taskId"] as? Int)

            // Unplugged: the daemon's warning reaches the job as SIGTERM; the unit ends with the job's status, and
            // the request is cancelled with it (bgtask runs its command once).
            try tree.set("AC", ["online": "0"])
            #expect(
                eventually(timeout: .seconds(30)) { FileManager.default.fileExists(atPath: marks + "/terminated") },
                "the job never got SIGTERM:\n\(service.log)")
            try systemd.waitFor("backup-on-ac.service", ["ActiveState", "Result"], what: "the job to end") {
                $0["ActiveState"] == "failed" || $0["ActiveState"] == "inactive"
            }
            #expect(try systemd.show("backup-on-ac.service", ["Result"])["Result"] == "exit-code")
            // Warned by the daemon, which logs why, the job stopped and bgtask completed the task (as failed:
            // SIGTERM's 143).
            #expect(
                service.log.contains("org.example.backup was asked to end scheduled task \(task): ac stopped holding"),
                "\(service.log)")
            #expect(
                eventually { service.log.contains("org.example.backup task \(task) ended (ended)") }, "\(service.log)")
            #expect(eventually { (try? requests(of: service).isEmpty) == true })

            // Again, plugged, left to finish: the task completes and the unit succeeds.
            try systemd.systemctlSucceeding(["reset-failed", "backup-on-ac.service"])
            _ = try systemd.directory.write("finish", "")
            try systemd.systemctlSucceeding(["start", "backup-on-ac.service"])
            _ = try waitForRequest(of: service) { $0["state"] as? String == "pending" }
            try tree.set("AC", ["online": "1"])
            try systemd.waitFor("backup-on-ac.service", ["ActiveState", "Result"], what: "the job to finish") {
                $0["ActiveState"] == "inactive" || $0["ActiveState"] == "failed"
            }
            #expect(try systemd.show("backup-on-ac.service", ["Result"])["Result"] == "success", "\(service.log)")
            let starts = (try? String(contentsOfFile: marks + "/started", encoding: .utf8)) ?? ""
            #expect(starts.split(separator: "\n").count == 2)
            #expect(try requests(of: service).isEmpty)
        }
    }

    /// The requests `bgtask requests --json` (the installed CLI, through the socket unit) lists.
    private func requests(of service: InstalledUserService) throws -> [[String: Any]] {
        let (status, output) = try runProgram(
            [service.prefix + "/bin/bgtask", "--socket", service.socketPath, "requests", "--json"])
        guard status == 0, let reply = try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any],
            let requests = reply["requests"] as? [[String: Any]]
        else { throw HarnessError("bgtask requests failed: \(output)") }
        return requests
    }

    /// Waits (at most 30 s) until the example's request is listed and `condition` holds for it; the request then.
    private func waitForRequest(
        of service: InstalledUserService, _ condition: @escaping ([String: Any]) -> Bool
    ) throws -> [String: Any] {
        var found: [String: Any]?
        let held = try eventually(timeout: .seconds(30)) {
            found = try requests(of: service).first {
                $0["app"] as? String == "org.example.backup" && $0["identifier"] as? String == "nightly"
            }
            return found.map(condition) ?? false
        }
        guard held, let found else {
            throw HarnessError("the request never got there (\(String(describing: found))):\n\(service.log)")
        }
        return found
    }
}
