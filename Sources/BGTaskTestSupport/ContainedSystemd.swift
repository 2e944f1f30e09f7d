// A real systemd user manager of the test's own, contained so that it can touch nothing else on the machine.

import BGTaskSystem
import Foundation
import Glibc

/// A `systemd --user` manager started with the contained recipe: in a new session and a private mount namespace
/// (its `/run/systemd` a tmpfs of its own), moved first into cgroups the test creates (so it adopts those, never
/// the machine's root cgroup), with `XDG_RUNTIME_DIR` in a scratch directory. Tests drive it with
/// `systemctl --user` (`systemctl(_:)`, `show(_:_:)`); unit files go in `unitDirectory`.
///
/// `close()` (and deinit) asks the manager to exit, kills whatever is left in its cgroups, reaps it and removes
/// its cgroups and directories: nothing it made outlives the test.
public final class ContainedSystemd {
    /// Why a contained manager cannot run on this host, or nil when it can.
    public static var unavailableReason: String? {
        if getuid() != 0 { return "a contained systemd manager needs root (cgroups and a private mount namespace)" }
        for tool in ["/lib/systemd/systemd", "/usr/bin/unshare", "/usr/bin/setsid", "/usr/bin/systemctl"]
        where !FileManager.default.isExecutableFile(atPath: tool) {
            return "\(tool) is missing"
        }
        if cgroupRoots.isEmpty { return "no cgroup hierarchy for systemd at /sys/fs/cgroup" }
        return nil
    }

    /// The hierarchies the manager's cgroup must be made in: on a hybrid host both the named `systemd` one and
    /// the cgroup2 one, on a pure cgroup2 host the one at `/sys/fs/cgroup`.
    static var cgroupRoots: [String] {
        let manager = FileManager.default
        if manager.fileExists(atPath: "/sys/fs/cgroup/cgroup.controllers") { return ["/sys/fs/cgroup"] }
        return ["/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified"].filter { manager.fileExists(atPath: $0) }
    }

    /// The scratch directory holding the runtime directory, the start script and the manager's output.
    public let directory: ScratchDirectory
    /// The manager's `XDG_RUNTIME_DIR`.
    public let runtimeDirectory: String
    /// Where unit files and drop-ins for this manager go (`$XDG_RUNTIME_DIR/systemd/user`).
    public let unitDirectory: String
    /// The cgroups the test made for the manager, one per hierarchy.
    public let cgroups: [String]
    /// The manager's process (the test's child).
    public let manager: SpawnedProcess
    /// The manager's `XDG_CONFIG_HOME` and `XDG_DATA_HOME`, in the scratch directory: `systemctl --user enable`
    /// writes its links under the first, and unit files in `DATA_HOME/systemd/user` are found as a user's are.
    public let configHome: String
    public let dataHome: String
    private var isClosed = false

    /// Starts a manager and waits (at most 30 s) until `systemctl --user` reaches it. `dataHome` is its
    /// `XDG_DATA_HOME` within the scratch directory (`prefix/lib` makes the units a `scripts/install --prefix
    /// DIRECTORY/prefix` installs its user's own).
    public init(dataHome: String = "data") throws {
        if let reason = Self.unavailableReason { throw HarnessError(reason) }
        directory = try ScratchDirectory(prefix: "bgtask-systemd")
        runtimeDirectory = directory.path + "/run"
        unitDirectory = runtimeDirectory + "/systemd/user"
        configHome = directory.path + "/config"
        self.dataHome = directory.path + "/" + dataHome
        try FileManager.default.createDirectory(
            atPath: unitDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        chmod(runtimeDirectory, 0o700)
        let name = "bgtask-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        cgroups = Self.cgroupRoots.map { "\($0)/\(name)" }
        let script = """
            #!/bin/sh
            set -e
            # The manager adopts the cgroup it starts in: make it one of the test's own, in every hierarchy.
            for cgroup in \(cgroups.map { "'\($0)'" }.joined(separator: " ")); do
                mkdir "$cgroup"
                echo $$ >"$cgroup/cgroup.procs"
            done
            # A private /run/systemd with the "booted with systemd" marker, seen by this namespace alone.
            mount --make-rprivate /
            if [ -d /run/systemd ]; then mount -t tmpfs tmpfs /run/systemd; else mount -t tmpfs tmpfs /run; fi
            mkdir -p /run/systemd/system
            export XDG_RUNTIME_DIR='\(runtimeDirectory)'
            # The user's configuration and data directories are the test's too: nothing under $HOME is read or
            # written.
            export XDG_CONFIG_HOME='\(configHome)' XDG_DATA_HOME='\(self.dataHome)'
            exec /lib/systemd/systemd --user
            """
        let scriptPath = try directory.write("start-manager", script)
        chmod(scriptPath, 0o755)
        let output = try FileDescriptor.open(
            directory.path + "/manager.log", .writeOnly, options: [.create, .truncate], permissions: 0o644)
        defer { try? output.close() }
        // Not a group leader, so setsid(1) makes this very process the session leader instead of forking: the
        // manager is the test's child, and its pidfd the test's handle.
        manager = try ProcessSpawner.spawn(
            ["/usr/bin/setsid", "/usr/bin/unshare", "--mount", scriptPath],
            options: SpawnOptions(standardOutput: .fileDescriptor(output), standardError: .fileDescriptor(output)))
        do {
            let deadline = MonotonicClock.now() + Duration.seconds(30).nanosecondCount
            while try systemctl(["show", "-p", "Version", "--value"]).status != 0 {
                guard MonotonicClock.now() < deadline, try !manager.pidFD.hasExited else {
                    throw HarnessError("the contained manager did not come up:\n\(managerLog)")
                }
                _ = try manager.pidFD.waitForExit(timeout: .milliseconds(50))
            }
        } catch {
            close()
            throw error
        }
    }

    /// What the manager printed.
    public var managerLog: String {
        (try? String(contentsOfFile: directory.path + "/manager.log", encoding: .utf8)) ?? ""
    }

    /// The environment a client of this manager needs.
    public var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["XDG_RUNTIME_DIR"] = runtimeDirectory
        environment["XDG_CONFIG_HOME"] = configHome
        environment["XDG_DATA_HOME"] = dataHome
        environment["DBUS_SESSION_BUS_ADDRESS"] = nil
        return environment
    }

    /// Runs `systemctl --user ARGUMENTS` against this manager; its status and outputs.
    @discardableResult
    public func systemctl(_ arguments: [String]) throws -> (status: Int32, output: String, errors: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/systemctl")
        process.arguments = ["--user"] + arguments
        process.environment = environment
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let outputData = output.fileHandleForReading.readDataToEndOfFile()
        let errorData = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (
            process.terminationStatus, String(decoding: outputData, as: UTF8.self),
            String(decoding: errorData, as: UTF8.self)
        )
    }

    /// Runs `systemctl --user ARGUMENTS` and fails with its error output unless it succeeds.
    public func systemctlSucceeding(_ arguments: [String]) throws {
        let result = try systemctl(arguments)
        guard result.status == 0 else {
            throw HarnessError("systemctl --user \(arguments.joined(separator: " ")) failed: \(result.errors)")
        }
    }

    /// The properties of `unit`, as `systemctl show` prints them.
    public func show(_ unit: String, _ properties: [String]) throws -> [String: String] {
        let result = try systemctl(["show", unit, "-p", properties.joined(separator: ",")])
        var values: [String: String] = [:]
        for line in result.output.split(separator: "\n") {
            guard let equals = line.firstIndex(of: "=") else { continue }
            values[String(line[..<equals])] = String(line[line.index(after: equals)...])
        }
        return values
    }

    /// Waits at most `timeout` until `condition` holds of `unit`'s `properties`; returns them.
    @discardableResult
    public func waitFor(
        _ unit: String, _ properties: [String], timeout: Duration = .seconds(30), what: String,
        _ condition: ([String: String]) -> Bool
    ) throws -> [String: String] {
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        while true {
            let values = try show(unit, properties)
            if condition(values) { return values }
            guard MonotonicClock.now() < deadline else {
                throw HarnessError("\(unit): \(what) did not happen within \(timeout); last \(values)")
            }
            _ = try manager.pidFD.waitForExit(timeout: .milliseconds(100))
        }
    }

    /// The processes in the manager's cgroups (cgroup2 hierarchy, or the only one), recursively.
    public func processesInCgroups() -> [pid_t] {
        var pids: [pid_t] = []
        for root in cgroups {
            guard let walker = FileManager.default.enumerator(atPath: root) else { continue }
            var files = [root + "/cgroup.procs"]
            for case let path as String in walker where path.hasSuffix("/cgroup.procs") {
                files.append(root + "/" + path)
            }
            for file in files {
                let text = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
                pids += text.split(separator: "\n").compactMap { pid_t($0) }
            }
        }
        return Array(Set(pids)).sorted()
    }

    /// Ends the manager (`systemctl --user exit`, SIGKILL to what is left in its cgroups after 15 s), reaps it,
    /// and removes its cgroups and directories. Safe to call twice.
    public func close() {
        guard !isClosed else { return }
        isClosed = true
        _ = try? systemctl(["exit"])
        if (try? manager.pidFD.waitForExit(timeout: .seconds(15))) != true {
            try? manager.pidFD.sendSignal(.kill)
        }
        // Anything left in the test's cgroups was started by this manager: end it.
        for pid in processesInCgroups() where pid != getpid() {
            if let pidFD = try? PidFD.open(pid: pid) {
                try? pidFD.sendSignal(.kill)
                try? pidFD.close()
            }
        }
        _ = try? manager.waitForExit()
        try? manager.pidFD.close()
        for root in cgroups { Self.removeCgroup(root) }
        directory.remove()
    }

    /// Removes a cgroup and its children, deepest first, waiting briefly for killed processes to leave.
    static func removeCgroup(_ path: String) {
        guard FileManager.default.fileExists(atPath: path) else { return }
        var directories = [path]
        if let walker = FileManager.default.enumerator(atPath: path) {
            for case let relative as String in walker {
                var isDirectory: ObjCBool = false
                if FileManager.default.fileExists(atPath: path + "/" + relative, isDirectory: &isDirectory),
                    isDirectory.boolValue
                {
                    directories.append(path + "/" + relative)
                }
            }
        }
        for directory in directories.sorted(by: { $0.count > $1.count }) {
            for _ in 0..<100 where rmdir(directory) != 0 && errno == EBUSY { usleep(20_000) }
        }
    }

    deinit { close() }
}
