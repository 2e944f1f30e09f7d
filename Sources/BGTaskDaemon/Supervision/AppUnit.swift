// The transient unit a managed app runs in when the service manager starts it: its name, and the properties it is
// created with.

import BGTaskSystem

/// What `UnitSupervisor` asks the service manager to make for an app: `app-bgtask-NAME-RANDOM.service` in
/// `app.slice`, as desktop environments name their apps, with the properties below. What it asks depends on the
/// manager only through `isSystemInstance` and `managerVersion`.
enum AppUnit {
    /// `app-bgtask-NAME-RANDOM.service`: the name reduced to the characters a unit name takes (48 at most), then 32
    /// random bits, so a restarted daemon never meets a unit an adopted app still has.
    static func name(for name: String) -> String {
        let safe = String(
            name.unicodeScalars.prefix(48).map { scalar -> Character in
                switch scalar {
                case "a"..."z", "A"..."Z", "0"..."9", ".", "_": Character(scalar)
                default: "_"
                }
            })
        let random = String(UInt32.random(in: 0...UInt32.max), radix: 16)
        return "app-bgtask-\(safe)-\(String(repeating: "0", count: 8 - random.count))\(random).service"
    }

    /// Whether `unit` is named as `name(for:)` names units.
    static func isAppUnitName(_ unit: String) -> Bool {
        unit.hasPrefix("app-bgtask-") && unit.hasSuffix(".service") && !unit.contains("/") && unit.utf8.count <= 256
    }

    /// The transient unit's properties: the program as a `Type=exec` service in `app.slice`, collected once it ends,
    /// its output in the journal under the app's name (or a file under `--log-dir`), as the caller's user on the
    /// system instance (`isSystemInstance`), with an `OOMScoreAdjust=` of its own and the environment an app needs
    /// to find the daemon. The program gets its arguments exactly, as a forked app does: `ExecStartEx` with
    /// `no-env-expand` where the manager has it (systemd 243 and later), else `ExecStart` with every `$` written
    /// `$$`, which the manager's expansion gives back as it was (`%` it never expands in a command sent over the
    /// bus).
    static func properties(
        for request: LaunchRequest, unit: String, isSystemInstance: Bool, managerVersion: Int
    ) -> [UnitProperty] {
        let program = request.argv.first ?? ""
        let command = ExecCommand(path: program, arguments: request.argv, expandsEnvironment: false)
        var environment = ["BGTASK_SOCKET=" + request.socketPath, "BGTASK_APP_NAME=" + request.name]
        if let language = ProcessInfoEnvironment.value("LANG") { environment.append("LANG=" + language) }
        var properties: [UnitProperty] = [
            UnitProperty("Description", .string("bgtask app \(request.name)")),
            UnitProperty("Type", .string("exec")),
            UnitProperty("Slice", .string("app.slice")),
            UnitProperty("CollectMode", .string("inactive-or-failed")),
            managerVersion >= UnitProperty.execStartExVersion ? .execStartEx([command]) : .execStart([command]),
            UnitProperty("Environment", .array(element: "s", environment.map { .string($0) })),
            // The app's own (0 unless its apps.d file says), never the daemon's (which its unit lowers to outlive
            // the apps).
            UnitProperty("OOMScoreAdjust", .int32(request.oomScoreAdjust)),
            UnitProperty("SyslogIdentifier", .string(request.name)),
        ]
        if let directory = request.logDirectory {
            let safe = String(request.name.unicodeScalars.map { $0 == "/" || $0.value < 0x20 ? "_" : Character($0) })
            properties.append(UnitProperty("StandardOutput", .string("append:\(directory)/\(safe).log")))
            properties.append(UnitProperty("StandardError", .string("inherit")))
        } else {
            properties.append(UnitProperty("StandardOutput", .string("journal")))
            properties.append(UnitProperty("StandardError", .string("inherit")))
        }
        if isSystemInstance && request.changesUser {
            properties.append(UnitProperty("User", .string(String(request.uid))))
        }
        if !program.contains("/"), managerVersion >= 250 {
            // The program is found as the daemon would find it, not on the manager's own search path.
            let path = ProcessInfoEnvironment.value("PATH") ?? ProcessLauncher.defaultSearchPath
            let directories = path.split(separator: ":").filter { $0.hasPrefix("/") }.map {
                BusValue.string(String($0))
            }
            properties.append(UnitProperty("ExecSearchPath", .array(element: "s", directories)))
        }
        if managerVersion >= 254 {
            // systemd's memory pressure protocol on the app's own cgroup.
            properties.append(UnitProperty("MemoryPressureWatch", .string("auto")))
        }
        return properties
    }
}
