// A real systemd user manager of the caller's own, contained so that it can touch nothing else on the machine:
// shared by the service tests and `bgtask-soak --systemd`.

import BGTaskPOSIX
import Glibc

/// Why a contained systemd manager could not be started or driven.
public struct ContainedSystemdError: Error, CustomStringConvertible {
    /// What went wrong.
    public var description: String

    /// An error saying `description`.
    public init(_ description: String) { self.description = description }
}

/// A `systemd --user` manager started with the contained recipe: in a new session and a private mount namespace
/// (its `/run/systemd` a tmpfs of its own), moved first into cgroups the caller creates (so it adopts those, never
/// the machine's root cgroup), with `XDG_RUNTIME_DIR` in a scratch directory. Drive it with `systemctl --user`
/// (`systemctl(_:)`, `show(_:_:)`); unit files go in `unitDirectory`.
///
/// `close()` (and deinit) asks the manager to exit, kills whatever is left in its cgroups, reaps it and removes
/// its cgroups and directories: nothing it made outlives its owner.
public final class ContainedSystemd {
    /// Why a contained manager cannot run on this host, or nil when it can.
    public static var unavailableReason: String? {
        if getuid() != 0 { return "a contained systemd manager needs root (cgroups and a private mount namespace)" }
        for tool in [
            "/lib/systemd/systemd", "/usr/bin/unshare", "/usr/bin/setsid", "/usr/bin/systemctl", "/usr/bin/timeout",
        ] where access(tool, X_OK) != 0 {
            return "\(tool) is missing"
        }
        if cgroupRoots.isEmpty { return "no cgroup hierarchy for systemd at /sys/fs/cgroup" }
        return nil
    }

    /// The hierarchies the manager's cgroup must be made in: on a hybrid host both the named `systemd` one and
    /// the cgroup2 one, on a pure cgroup2 host the one at `/sys/fs/cgroup`.
    static var cgroupRoots: [String] {
        if access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0 { return ["/sys/fs/cgroup"] }
        return ["/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified"].filter { access($0, F_OK) == 0 }
    }

    /// The scratch directory holding the runtime directory, the start script and the manager's output.
    public let directory: ManagerDirectory
    /// The manager's `XDG_RUNTIME_DIR`.
    public let runtimeDirectory: String
    /// Where unit files and drop-ins for this manager go (`$XDG_RUNTIME_DIR/systemd/user`).
    public let unitDirectory: String
    /// The cgroups made for the manager, one per hierarchy.
    public let cgroups: [String]
    /// The manager's process (the caller's child); with a lifetime, the `timeout(1)` whose only child is the
    /// manager.
    public let manager: SpawnedProcess
    /// The manager's `XDG_CONFIG_HOME`, `XDG_DATA_HOME` and `XDG_STATE_HOME`, in the scratch directory:
    /// `systemctl --user enable` writes its links under the first, unit files in `DATA_HOME/systemd/user` are found
    /// as a user's are, and a unit's `StateDirectory=` is made under the last.
    public let configHome: String
    public let dataHome: String
    public let stateHome: String
    private var isClosed = false

    /// Starts a manager and waits (at most 30 s) until `systemctl --user` reaches it. `dataHome` is its
    /// `XDG_DATA_HOME` within the scratch directory (`prefix/lib` makes the units a `scripts/install --prefix
    /// DIRECTORY/prefix` installs its user's own).
    ///
    /// With a `lifetime`, the manager runs under `timeout(1)`: once it has run that long it is told to exit
    /// (SIGTERM, which a user manager takes as `systemctl --user exit`, stopping its units) and killed 30 s later,
    /// so it ends even when its owner is killed before `close()`. `joining` names cgroups the caller made (in
    /// hierarchies the manager does not manage, such as a v1 memory cgroup that bounds or measures everything the
    /// manager starts), which the manager joins before it starts; the caller removes them.
    public init(dataHome: String = "data", lifetime: Duration? = nil, joining: [String] = []) throws {
        if let reason = Self.unavailableReason { throw ContainedSystemdError(reason) }
        directory = try ManagerDirectory(prefix: "bgtask-systemd")
        runtimeDirectory = directory.path + "/run"
        unitDirectory = runtimeDirectory + "/systemd/user"
        configHome = directory.path + "/config"
        stateHome = directory.path + "/state"
        self.dataHome = directory.path + "/" + dataHome
        try makeDirectories(unitDirectory)
        chmod(runtimeDirectory, 0o700)
        let name = "bgtask-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        cgroups = Self.cgroupRoots.map { "\($0)/\(name)" }
        let bound = lifetime.map { "/usr/bin/timeout --kill-after=30 \(max(1, $0.components.seconds)) " } ?? ""
        let script = """
            #!/bin/sh
            set -e
            # The manager adopts the cgroup it starts in: make it one of the caller's own, in every hierarchy.
            for cgroup in \(cgroups.map { "'\($0)'" }.joined(separator: " ")); do
                mkdir "$cgroup"
                echo $$ >"$cgroup/cgroup.procs"
            done
            # And the caller's cgroups of other hierarchies, made for this manager.
            for cgroup in \(joining.map { "'\($0)'" }.joined(separator: " ")); do
                echo $$ >"$cgroup/cgroup.procs"
            done
            # A private /run/systemd with the "booted with systemd" marker, seen by this namespace alone.
            mount --make-rprivate /
            if [ -d /run/systemd ]; then mount -t tmpfs tmpfs /run/systemd; else mount -t tmpfs tmpfs /run; fi
            mkdir -p /run/systemd/system
            export XDG_RUNTIME_DIR='\(runtimeDirectory)'
            # The user's configuration and data directories are the caller's too: nothing under $HOME is read or
            # written.
            export XDG_CONFIG_HOME='\(configHome)' XDG_DATA_HOME='\(self.dataHome)' XDG_STATE_HOME='\(stateHome)'
            exec \(bound)/lib/systemd/systemd --user
            """
        let scriptPath = try directory.write("start-manager", script)
        chmod(scriptPath, 0o755)
        let output = try FileDescriptor.open(
            directory.path + "/manager.log", .writeOnly, options: [.create, .truncate], permissions: 0o644)
        defer { try? output.close() }
        // Not a group leader, so setsid(1) makes this very process the session leader instead of forking: the
        // manager is the caller's child, and its pidfd the caller's handle.
        manager = try ProcessSpawner.spawn(
            ["/usr/bin/setsid", "/usr/bin/unshare", "--mount", scriptPath],
            options: SpawnOptions(standardOutput: .fileDescriptor(output), standardError: .fileDescriptor(output)))
        do {
            let deadline = MonotonicClock.now() + Duration.seconds(30).nanosecondCount
            while try systemctl(["show", "-p", "Version", "--value"]).status != 0 {
                guard MonotonicClock.now() < deadline, try !manager.pidFD.hasExited else {
                    throw ContainedSystemdError("the contained manager did not come up:\n\(managerLog)")
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
        (try? FileDescriptor.readText(atPath: directory.path + "/manager.log", limit: 1 << 20)) ?? ""
    }

    /// The environment a client of this manager needs.
    public var environment: [String: String] {
        var environment = ProcessEnvironment.current()
        environment["XDG_RUNTIME_DIR"] = runtimeDirectory
        environment["XDG_CONFIG_HOME"] = configHome
        environment["XDG_DATA_HOME"] = dataHome
        environment["XDG_STATE_HOME"] = stateHome
        environment["DBUS_SESSION_BUS_ADDRESS"] = nil
        return environment
    }

    /// Runs `systemctl --user ARGUMENTS` against this manager; its status and outputs.
    @discardableResult
    public func systemctl(_ arguments: [String]) throws -> (status: Int32, output: String, errors: String) {
        let (outputRead, outputWrite) = try FileDescriptor.pipe()
        let (errorRead, errorWrite) = try FileDescriptor.pipe()
        let process: SpawnedProcess
        do {
            process = try ProcessSpawner.spawn(
                ["/usr/bin/systemctl", "--user"] + arguments,
                options: SpawnOptions(
                    standardOutput: .fileDescriptor(outputWrite), standardError: .fileDescriptor(errorWrite),
                    environment: environment.map { "\($0.key)=\($0.value)" }))
        } catch {
            for descriptor in [outputRead, outputWrite, errorRead, errorWrite] { try? descriptor.close() }
            throw error
        }
        try? outputWrite.close()
        try? errorWrite.close()
        // Both outputs are read together, so neither pipe can fill while the other is waited on.
        var output: [UInt8] = []
        var errors: [UInt8] = []
        var open = [(outputRead, true), (errorRead, false)]
        while !open.isEmpty {
            for (index, (descriptor, isOutput)) in open.enumerated().reversed() {
                guard (try? descriptor.poll(for: .readable, timeout: .milliseconds(20)))?.isEmpty == false else {
                    continue
                }
                let bytes = (try? descriptor.read(upTo: 65_536)) ?? []
                if bytes.isEmpty {
                    try? descriptor.close()
                    open.remove(at: index)
                } else if isOutput {
                    output += bytes
                } else {
                    errors += bytes
                }
            }
        }
        let status = try process.waitForExit()
        try? process.pidFD.close()
        let code: Int32 =
            switch status {
            case .exited(let code): code
            default: 128
            }
        return (code, String(decoding: output, as: UTF8.self), String(decoding: errors, as: UTF8.self))
    }

    /// Runs `systemctl --user ARGUMENTS` and fails with its error output unless it succeeds.
    public func systemctlSucceeding(_ arguments: [String]) throws {
        let result = try systemctl(arguments)
        guard result.status == 0 else {
            throw ContainedSystemdError(
                "systemctl --user \(arguments.joined(separator: " ")) failed: \(result.errors)")
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
                throw ContainedSystemdError("\(unit): \(what) did not happen within \(timeout); last \(values)")
            }
            _ = try manager.pidFD.waitForExit(timeout: .milliseconds(100))
        }
    }

    /// The processes in the manager's cgroups, recursively.
    public func processesInCgroups() -> [pid_t] {
        var pids: Set<pid_t> = []
        for root in cgroups {
            for cgroup in subdirectories(of: root) {
                let text = (try? FileDescriptor.readText(atPath: cgroup + "/cgroup.procs", limit: 1 << 20)) ?? ""
                for line in text.split(separator: "\n") { if let pid = pid_t(line) { pids.insert(pid) } }
            }
        }
        return pids.sorted()
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
        // Anything left in the manager's cgroups was started by this manager: end it.
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
        guard access(path, F_OK) == 0 else { return }
        for directory in subdirectories(of: path).sorted(by: { $0.count > $1.count }) {
            for _ in 0..<100 where rmdir(directory) != 0 && errno == EBUSY { usleep(20_000) }
        }
    }

    deinit { close() }
}

/// `path` and every directory below it.
func subdirectories(of path: String) -> [String] {
    var result = [path]
    guard let stream = opendir(path) else { return result }
    defer { closedir(stream) }
    while let entry = readdir(stream) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        guard name != ".", name != "..", entry.pointee.d_type == UInt8(DT_DIR) else { continue }
        result += subdirectories(of: path + "/" + name)
    }
    return result
}

/// Makes `path` and the directories above it (mode 0755; the last 0700 is the caller's business).
func makeDirectories(_ path: String) throws {
    var current = ""
    for component in path.split(separator: "/") {
        current += "/" + component
        guard mkdir(current, 0o755) == 0 || errno == EEXIST else {
            throw ContainedSystemdError("cannot make \(current): \(Errno(rawValue: errno, operation: "mkdir"))")
        }
    }
}

/// A scratch directory, world-traversable (mode 0755), removed with its contents by `remove()`.
public final class ManagerDirectory: Sendable {
    /// Its path.
    public let path: String

    /// Creates a fresh directory under `$TMPDIR` (or `/tmp`); the prefix shows in its name.
    public init(prefix: String) throws {
        do {
            path = try TemporaryDirectory.make(prefix: prefix)
        } catch {
            throw ContainedSystemdError("cannot make a scratch directory: \(error)")
        }
    }

    /// Writes `text` to `name` inside the directory (making the directories above it) and returns the file's path.
    @discardableResult
    public func write(_ name: String, _ text: String) throws -> String {
        let file = path + "/" + name
        if let slash = file.lastIndex(of: "/") { try makeDirectories(String(file[..<slash])) }
        let descriptor = try FileDescriptor.open(file, .writeOnly, options: [.create, .truncate], permissions: 0o644)
        defer { try? descriptor.close() }
        try descriptor.writeAll(Array(text.utf8))
        return file
    }

    /// Removes the directory and everything in it, unless `BGTASK_KEEP_TEST_DIRS=1` asks to keep it for a
    /// post-mortem (its path is then printed).
    public func remove() {
        if ProcessEnvironment.current()["BGTASK_KEEP_TEST_DIRS"] == "1" {
            print("kept \(path)")
            return
        }
        guard let remover = try? ProcessSpawner.spawn(["rm", "-rf", "--one-file-system", path]) else { return }
        _ = try? remover.waitForExit()
        try? remover.pidFD.close()
    }
}
