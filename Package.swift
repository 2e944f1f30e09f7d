// swift-tools-version:6.0
// bgtaskd: iOS-style background execution for Linux apps.
import PackageDescription

let package = Package(
    name: "bgtaskd",
    products: [
        .library(name: "BGTaskCore", targets: ["BGTaskCore"]),
        .library(name: "BGTaskSystem", targets: ["BGTaskSystem"]),
        .library(name: "BGTaskConfig", targets: ["BGTaskConfig"]),
        .library(name: "BGTaskProtocol", targets: ["BGTaskProtocol"]),
        .library(name: "BGTaskClient", targets: ["BGTaskClient"]),
        .library(name: "BGTaskCLI", targets: ["BGTaskCLI"]),
        .executable(name: "bgtaskd", targets: ["bgtaskd"]),
        .executable(name: "bgtask", targets: ["bgtask"]),
        .executable(name: "bgtask-bench", targets: ["bgtask-bench"]),
        .executable(name: "bgtask-soak", targets: ["bgtask-soak"]),
        .executable(name: "bgtask-demo-app", targets: ["bgtask-demo-app"]),
    ],
    targets: [
        // The words shared from the policy to the wire: states, event kinds, behaviours, reasons, bands.
        .target(name: "BGTaskVocabulary"),
        // The lifecycle and lease policy: a pure state machine, standard library only.
        .target(name: "BGTaskCore", dependencies: ["BGTaskVocabulary"]),
        // libsystemd (sd-bus, sd-daemon, sd-event, sd-journal) plus inline wrappers for syscalls Swift cannot call.
        .systemLibrary(
            name: "CSystemd",
            pkgConfig: "libsystemd",
            providers: [.apt(["libsystemd-dev"])]
        ),
        // The launcher's child in C (clone to execve with raw system calls), a translation unit of its own compiled
        // with _GNU_SOURCE.
        .target(name: "CLauncher", cSettings: [.define("_GNU_SOURCE")]),
        // The typed Linux layer: descriptors, pidfds, sockets, procfs, the sd-event loop, sd_notify, journal, and the
        // service manager's client over sd-bus.
        .target(name: "BGTaskSystem", dependencies: ["BGTaskVocabulary", "CLauncher", "CSystemd"]),
        // bgtaskd.conf: systemd value syntax, INI parsing, the typed configuration, loading and --dump-config.
        .target(name: "BGTaskConfig", dependencies: ["BGTaskCore"]),
        // The Varlink IDL: the grammar of names, the parser and its model, standard library only, so that the build
        // tool can use it as well as the codec.
        .target(name: "VarlinkIDL"),
        // The Varlink wire protocol: framing, the codec, the interface's Codable types and errors. The `.varlink`
        // files in the target are the source of truth; the plugin embeds them as strings and generates the wire
        // types of each one with a `.bindings` file.
        .target(
            name: "BGTaskProtocol", dependencies: ["BGTaskVocabulary", "VarlinkIDL"], plugins: ["EmbedInterface"]),
        // docs/PROTOCOL.md generated from the parsed interfaces, and JSON values checked against them: for tests and
        // docs, not linked into the daemon.
        .target(name: "BGTaskIDL", dependencies: ["BGTaskProtocol", "VarlinkIDL"]),
        // Build-time tool behind the plugin: turns one `.varlink` file into a Swift string constant, and with its
        // bindings into the interface's wire types.
        .executableTarget(name: "EmbedInterfaceTool", dependencies: ["VarlinkIDL"]),
        // Build-tool plugin: runs EmbedInterfaceTool on every `.varlink` file of the target that uses it.
        .plugin(name: "EmbedInterface", capability: .buildTool(), dependencies: ["EmbedInterfaceTool"]),
        // The client library: socket resolution, a blocking Varlink connection, typed calls, and
        // BackgroundApplication, the UIApplication-shaped API apps use.
        .target(name: "BGTaskClient", dependencies: ["BGTaskProtocol", "BGTaskSystem"]),
        // A scriptable app for end-to-end tests: stdin commands in, one stdout line per outcome or event.
        .executableTarget(
            name: "BGTaskFixtureApp", dependencies: ["BGTaskClient", "BGTaskSystem"], path: "Tests/Fixtures/FixtureApp"
        ),
        // The example app of the client library: an upload that finishes in background under a lease.
        .executableTarget(name: "PhotoUploader", dependencies: ["BGTaskClient"], path: "Examples/PhotoUploader"),
        // The daemon: the manager wiring the core to Linux, the Varlink server, the action executor.
        .target(
            name: "BGTaskDaemon",
            dependencies: ["BGTaskArguments", "BGTaskCore", "BGTaskProtocol", "BGTaskSystem", "BGTaskConfig"]),
        .executableTarget(name: "bgtaskd", dependencies: ["BGTaskDaemon", "BGTaskConfig", "BGTaskSystem"]),
        // A small argument-parsing framework in the shape of swift-argument-parser: specs as data, a parser, help,
        // usage errors and man pages generated from the specs.
        .target(name: "BGTaskArguments"),
        // Supervising children: a command run the way timeout(1) runs it (the supervision behind bgtask run), and a
        // private service under timeout(1), ready on READY=1 (the demo's and the benchmarks' bgtaskd).
        .target(name: "BGTaskSupervision", dependencies: ["BGTaskSystem"]),
        // The bgtask command line: its subcommands (one file each), which talk to the daemon through the client
        // library, and the rendering of the daemon's replies.
        .target(
            name: "BGTaskCLI",
            dependencies: [
                "BGTaskArguments", "BGTaskClient", "BGTaskConfig", "BGTaskProtocol", "BGTaskSupervision",
                "BGTaskSystem",
            ]
        ),
        // The sample app of `bgtask demo`: a BackgroundApplication configured by its arguments, printing one line
        // per thing it experiences.
        .target(name: "BGTaskDemoApp", dependencies: ["BGTaskClient"]),
        .executableTarget(name: "bgtask-demo-app", dependencies: ["BGTaskDemoApp"]),
        // `bgtask demo`: a private daemon, sample apps, and the scenes narrated with real output (the DemoRunner).
        .target(
            name: "BGTaskDemo",
            dependencies: ["BGTaskArguments", "BGTaskCLI", "BGTaskClient", "BGTaskSupervision", "BGTaskSystem"]),
        // The bgtask executable: hands the command line to BGTaskCLI, with the demo plugged in.
        .executableTarget(name: "bgtask", dependencies: ["BGTaskCLI", "BGTaskDemo"]),
        // A systemd user manager contained in a private mount namespace and cgroups of its own: for the service
        // tests and `bgtask-soak --systemd`.
        .target(name: "BGTaskContainedSystemd", dependencies: ["BGTaskSystem"]),
        // SplitMix64 seeded once, for the tests' randomized inputs and the soak's replayable schedule.
        .target(name: "BGTaskSeededRandom"),
        // Test helpers shared by every test target: manual clock and loop, fakes, harnesses.
        .target(
            name: "BGTaskTestSupport",
            dependencies: [
                "BGTaskContainedSystemd", "BGTaskCore", "BGTaskProtocol", "BGTaskSeededRandom", "BGTaskSystem",
            ]),
        // Test fixture: sends one raw Varlink call, for calls made as another user.
        .executableTarget(name: "BGTaskRawCall", dependencies: ["BGTaskSystem"], path: "Tests/Fixtures/RawCall"),
        // Test fixture: one ProcessLauncher launch from a descriptor table the tests arrange (streams at 0, 1 or 2,
        // descriptors left open), under a seccomp filter when the tests want the launcher's fallbacks.
        .executableTarget(
            name: "BGTaskLaunchProbe", dependencies: ["BGTaskSystem"], path: "Tests/Fixtures/LaunchProbe"),
        // Test fixture: floods of connections, registrations, bytes and calls, for hostile peers of another uid.
        .executableTarget(
            name: "BGTaskHostileClient", dependencies: ["BGTaskSystem"], path: "Tests/Fixtures/HostileClient"),
        // Measurements of a running bgtaskd under load (the deadline benchmark), shared by bgtask-bench and the
        // tests that assert on them; `reclaim --systemd` runs the daemon under a contained systemd manager.
        .target(
            name: "BGTaskBenchmarks",
            dependencies: [
                "BGTaskClient", "BGTaskConfig", "BGTaskContainedSystemd", "BGTaskProtocol", "BGTaskSupervision",
                "BGTaskSystem",
            ]),
        // The soak test's invariant checker: evidence gathered outside the daemon in, a report of violations out.
        .target(name: "BGTaskSoak", dependencies: ["BGTaskProtocol"]),
        // The soak harness: the synthetic apps, the daemon under fault (run by the harness, or by a contained systemd
        // manager), the evidence gathered outside it, and the run's report around the checker's.
        .target(
            name: "BGTaskSoakHarness",
            dependencies: [
                "BGTaskSoak", "BGTaskClient", "BGTaskContainedSystemd", "BGTaskProtocol", "BGTaskSeededRandom",
                "BGTaskSystem",
            ]),
        // The soak's command line; re-runs itself as the synthetic apps and the hostile client.
        .executableTarget(name: "bgtask-soak", dependencies: ["BGTaskSoakHarness", "BGTaskSystem"]),
        // Benchmarks; build with `swift build -c release` (every product: ipc and deadlines start the bgtaskd built
        // beside it, and say so when it is missing).
        .executableTarget(
            name: "bgtask-bench", dependencies: ["BGTaskBenchmarks", "BGTaskCore", "BGTaskSystem"]),
        .testTarget(name: "BGTaskCoreTests", dependencies: ["BGTaskCore", "BGTaskTestSupport"]),
        .testTarget(name: "BGTaskArgumentsTests", dependencies: ["BGTaskArguments"]),
        .testTarget(name: "BGTaskSoakTests", dependencies: ["BGTaskSoak", "BGTaskProtocol"]),
        // Runs the built bgtask-soak against the built bgtaskd (a minute, 50 apps, every fault), so it depends on
        // both executables.
        .testTarget(
            name: "BGTaskSoakRunTests",
            dependencies: ["BGTaskSoakHarness", "BGTaskSystem", "BGTaskTestSupport", "bgtaskd", "bgtask-soak"]),
        .testTarget(
            name: "BGTaskSupervisionTests", dependencies: ["BGTaskSupervision", "BGTaskSystem", "BGTaskTestSupport"]),
        // docs/ARCHITECTURE.md's module table against this manifest and the sources' imports.
        .testTarget(name: "BGTaskArchitectureTests", dependencies: ["BGTaskTestSupport"]),
        // CSystemd: the sd-bus message tests build messages of types the library never sends. Depends on the launch
        // fixture it runs as a process, so it is built before the tests.
        .testTarget(
            name: "BGTaskSystemTests",
            dependencies: ["BGTaskSystem", "BGTaskTestSupport", "CSystemd", "BGTaskLaunchProbe"]),
        .testTarget(name: "BGTaskConfigTests", dependencies: ["BGTaskConfig", "BGTaskCore", "BGTaskTestSupport"]),
        .testTarget(
            name: "BGTaskProtocolTests",
            dependencies: ["BGTaskIDL", "BGTaskProtocol", "BGTaskSystem", "BGTaskTestSupport"]),
        // Runs the deadline and reclaim benchmarks at a small size against the real daemon, so it depends on the
        // executables (bgtask-bench re-runs itself as the apps' processes and as the status flooder; reclaim
        // --systemd installs bgtaskd and bgtask).
        .testTarget(
            name: "BGTaskBenchmarkTests",
            dependencies: [
                "BGTaskBenchmarks", "BGTaskSystem", "BGTaskTestSupport", "bgtaskd", "bgtask", "bgtask-bench",
            ]),
        // Depends on the executables it runs as processes (the daemon, the fixture, the example), so they are
        // built before the tests.
        .testTarget(
            name: "BGTaskClientTests",
            dependencies: [
                "BGTaskClient", "BGTaskProtocol", "BGTaskSystem", "BGTaskTestSupport", "bgtaskd", "BGTaskFixtureApp",
                "PhotoUploader",
            ]),
        .testTarget(
            name: "BGTaskDaemonTests",
            dependencies: [
                "BGTaskBenchmarks", "BGTaskDaemon", "BGTaskIDL", "BGTaskTestSupport", "BGTaskProtocol", "BGTaskConfig",
                "BGTaskCore", "BGTaskSystem", "bgtaskd", "BGTaskRawCall", "bgtask-bench",
            ]),
        // bgtaskd installed with scripts/install and run by a contained systemd user manager; depends on the
        // executables it installs and runs.
        .testTarget(
            name: "BGTaskServiceTests",
            dependencies: [
                "BGTaskProtocol", "BGTaskSystem", "BGTaskTestSupport", "bgtaskd", "bgtask", "BGTaskFixtureApp",
            ]),
        // Hostile peers against the real daemon: every bound on what a client can make the daemon hold, each with
        // the daemon's vitals checked. Depends on the executables it runs as processes (the daemon, the hostile
        // client), so they are built before the tests.
        .testTarget(
            name: "BGTaskHostileClientTests",
            dependencies: [
                "BGTaskTestSupport", "BGTaskProtocol", "BGTaskSystem", "bgtaskd", "BGTaskHostileClient",
            ]),
        // Depends on the executables it runs as processes (bgtask, and bgtaskd for the end-to-end tests), so they
        // are built before the tests. The help snapshots are read through the source path, not bundled.
        .testTarget(
            name: "BGTaskCLITests",
            dependencies: [
                "BGTaskArguments", "BGTaskCLI", "BGTaskIDL", "BGTaskProtocol", "BGTaskSystem", "BGTaskTestSupport",
                "bgtask", "bgtaskd",
            ],
            exclude: ["Snapshots"]
        ),
        // Runs the real `bgtask demo` end to end, so it depends on the three executables the demo runs.
        .testTarget(
            name: "BGTaskDemoTests",
            dependencies: [
                "BGTaskDemo", "BGTaskDemoApp", "BGTaskConfig", "BGTaskSystem", "BGTaskTestSupport", "bgtask", "bgtaskd",
                "bgtask-demo-app",
            ]),
    ]
)
