// bgtaskd: parse the command line, check the host, load the configuration, start, serve until stopped.

import BGTaskConfig
import BGTaskDaemon
import BGTaskPOSIX
import BGTaskSystem
import Glibc

// Large blocks (the state file's text, a big reply) go back to the kernel when freed.
MemoryAllocator.mapBlocks(ofAtLeast: 128 * 1024)

let environment = ProcessEnvironment.current()
let standardError = FileDescriptor.standardError

func fail(_ message: String, status: Int32) -> Never {
    try? standardError.writeAll(Array("bgtaskd: \(message)\n".utf8))
    exit(status)
}

let options: DaemonOptions
do {
    options = try DaemonOptions.parse(Array(CommandLine.arguments.dropFirst()))
} catch {
    try? standardError.writeAll(Array(DaemonOptions.usageErrorText(error).utf8))
    exit(64)
}
switch options.mode {
case .help:
    print(DaemonOptions.help, terminator: "")
    exit(0)
case .version:
    print("bgtaskd \(Manager.version)")
    exit(0)
case .serve, .dumpConfiguration, .releaseStopped:
    break
}

let configurationPath = options.resolvedConfigurationPath(environment: environment)
// Only files root or the daemon's own user could have written are used (ConfigurationTrust).
let loaded = ConfigurationLoader(
    path: configurationPath, root: options.resolvedConfigurationRoot(environment: environment),
    daemonUserID: geteuid()
).load()
if options.mode == .dumpConfiguration {
    for diagnostic in loaded.diagnostics { try? standardError.writeAll(Array("\(diagnostic)\n".utf8)) }
    for refused in loaded.refused {
        try? standardError.writeAll(Array("\(refused.path): error: \(refused.refusal); \(refused.consequence)\n".utf8))
    }
    print(loaded.sources.renderComments() + loaded.configuration.renderINI(), terminator: "")
    exit(loaded.hasErrors ? 1 : 0)
}

let threshold = environment["BGTASKD_LOG_LEVEL"].flatMap(LogPriority.init(name:)) ?? .info
let logger = Logger(identifier: "bgtaskd", threshold: threshold)

let socketPath: String
do {
    socketPath = try options.resolvedSocketPath(environment: environment)
} catch {
    fail("\(error)", status: 64)
}
let statePath = options.resolvedStatePath(socketPath: socketPath, environment: environment)
let scheduledPath = options.resolvedScheduledPath(socketPath: socketPath, environment: environment)
if options.mode == .releaseStopped {
    exit(StoppedRelease.run(statePath: statePath, logger: logger))
}
ConfigurationLog.log(loaded, to: logger)
let problems = Requirements.problems()
guard problems.isEmpty else { fail(problems.joined(separator: "\n"), status: 1) }
// Every client costs a descriptor: use all the hard limit allows (the soft limit is often 1024 for select(2)'s sake).
do {
    try DescriptorLimit.raiseToHardLimit()
} catch {
    logger.warning("cannot raise the descriptor limit to its hard limit: \(error)")
}

do {
    let manager = try Manager(
        configuration: loaded.configuration, configurationPath: configurationPath, configurationSources: loaded.sources,
        socketPath: socketPath,
        statePath: statePath, scheduledPath: scheduledPath, logger: logger)
    manager.logDirectory = options.logDirectory
    // Under systemd (which sets INVOCATION_ID for the services it starts) apps are launched as its units.
    var serviceManager: ServiceManagerScope?
    if environment["INVOCATION_ID"] != nil {
        if !options.isUserInstance {
            serviceManager = .system
        } else if let runtime = environment["XDG_RUNTIME_DIR"] {
            serviceManager = .user(runtimeDirectory: runtime)
        }
    }
    try manager.start(serviceManager: serviceManager)
    exit(try manager.run())
} catch {
    fail("\(error)", status: 1)
}
