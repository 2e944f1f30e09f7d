// The real parts the condition tests drive: a private D-Bus bus with stand-ins for UPower, NetworkManager and logind
// (Tests/Fixtures/condition_services.py), a fake power_supply tree, and `ip` run inside another process's network
// namespace, never the test's own.

import BGTaskPOSIX
import Foundation
import Glibc

/// A private `dbus-daemon` on a socket in a scratch directory (a path, not an abstract socket, so that a daemon in
/// another network namespace reaches it too), under `timeout(1)`, killed when released.
public final class PrivateBus {
    /// Its D-Bus address, `unix:path=…`, as `DBUS_SYSTEM_BUS_ADDRESS` would name it.
    public let address: String
    private let process: ChildProcess
    private let directory: ScratchDirectory

    /// Starts the bus and returns once it listens.
    public init() throws {
        directory = try ScratchDirectory(prefix: "private-bus")
        let socket = directory.path + "/bus"
        // Its complaints (it cannot raise its descriptor limit) are not the test's output.
        let null = try FileDescriptor.open("/dev/null", .writeOnly)
        defer { try? null.close() }
        // A process group of its own, `timeout` and the bus in it: killing the group leaves no bus behind, as
        // killing `timeout` alone would.
        process = try ChildProcess(
            [
                "timeout", "--kill-after=5", "300", "dbus-daemon", "--session", "--address=unix:path=\(socket)",
                "--print-address", "--nofork",
            ], standardError: null, flags: .newProcessGroup)
        let printed = try process.waitForLine(startingWith: "unix:", timeout: .seconds(20))
        address = String(printed.prefix { $0 != "," })
    }

    /// Ends the bus (its clients see their connections close). Idempotent.
    public func stop() {
        guard !process.hasExited else { return }
        // SIGTERM to both: the bus exits and `timeout` reaps it before exiting itself, so nothing is left for
        // init to reap; SIGKILL to the group if that takes more than 10 s.
        try? ProcessGroup(id: process.pid).send(.terminate)
        if (try? process.waitForExit(timeout: .seconds(10))) == nil {
            try? ProcessGroup(id: process.pid).send(.kill)
        }
        process.terminate()
    }

    deinit { stop() }
}

/// The stand-ins for UPower (`upower`, and its display device `display`), NetworkManager (`networkmanager`) and
/// logind (`logind`) on a bus: each on a connection of its own, started, stopped and changed by command.
public final class ConditionServices {
    private let process: ChildProcess

    /// `/usr/bin/python3`: the distribution's Python, whose `dbus` and `gi` modules (python3-dbus, python3-gi) the
    /// stand-ins use.
    public static let python = "/usr/bin/python3"

    /// Starts the stand-ins' process on the bus at `address`, with no service on the bus yet.
    public init(address: String) throws {
        process = try ChildProcess([
            Self.python, Products.packageRoot + "/Tests/Fixtures/condition_services.py", "--address", address,
            "--lifetime", "300",
        ])
        try process.waitForLine(startingWith: "ready")
    }

    /// Runs one command (`start upower`, `set upower OnBattery true`, `stop logind`…) and waits for its answer.
    public func run(_ command: String) throws {
        try process.send(command)
        let answer = try process.waitForLine(timeout: .seconds(20)) { $0.hasPrefix("ok") || $0.hasPrefix("error") }
        guard answer.hasPrefix("ok") else { throw HarnessError("stand-ins: \(command): \(answer)") }
    }

    deinit { process.terminate() }

    /// Why this host cannot run the stand-ins: no `dbus-daemon`, or no Python with the `dbus` and `gi` modules.
    public static var unavailableReason: String? {
        guard access("/usr/bin/dbus-daemon", X_OK) == 0 else { return "dbus-daemon is not installed" }
        guard let result = try? runProgram([python, "-c", "import dbus, dbus.mainloop.glib, gi"]), result.status == 0
        else { return "\(python) lacks the dbus or gi module (python3-dbus, python3-gi)" }
        return nil
    }
}

extension HostRequirement {
    /// A private D-Bus bus with the condition stand-ins (`ConditionServices`).
    public static var conditionServices: Self { Self(unavailableReason: ConditionServices.unavailableReason) }
}

/// A power_supply class directory a test makes: supplies as directories of attribute files, written whole (to a
/// temporary file renamed into place, as a reader never sees a half-written value).
public final class FakePowerSupplies {
    public let directory: ScratchDirectory
    public var path: String { directory.path }

    public init() throws { directory = try ScratchDirectory(prefix: "power-supply") }

    /// Writes `attributes` (`type`, `online`, `capacity`…) of supply `name`, making it if needed.
    public func set(_ name: String, _ attributes: [String: String]) throws {
        for (file, value) in attributes.sorted(by: { $0.key < $1.key }) {
            let final = "\(name)/\(file)"
            try directory.write(final + ".new", value + "\n")
            guard rename(path + "/" + final + ".new", path + "/" + final) == 0 else {
                throw Errno(rawValue: errno, operation: "rename(\(final))")
            }
        }
    }

    /// Removes supply `name`.
    public func remove(_ name: String) throws {
        try FileManager.default.removeItem(atPath: path + "/" + name)
    }
}

/// `ip` run in the network namespace of process `pid` (`nsenter -t PID -n ip …`), refused unless that namespace is
/// not the test's own: a test may change only a namespace it made.
public func runInNetworkNamespace(of pid: pid_t, _ arguments: [String]) throws {
    let own = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/ns/net")
    let theirs = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/ns/net")
    guard own != theirs else {
        throw HarnessError("pid \(pid) is in the test's own network namespace (\(own)): refusing to change it")
    }
    let result = try runProgram(["nsenter", "-t", String(pid), "-n", "ip"] + arguments)
    guard result.status == 0 else {
        throw HarnessError("ip \(arguments.joined(separator: " ")) in \(theirs): \(result.output)")
    }
}
