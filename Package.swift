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
        // Inline C wrappers for the Linux calls Swift cannot make through Glibc (GNU-only names, variadic syscall()):
        // a header and a module map, linking nothing.
        .systemLibrary(name: "CPOSIX"),
        // libsystemd (sd-bus, sd-daemon, sd-event, sd-journal).
        .systemLibrary(
            name: "CSystemd",
            pkgConfig: "libsystemd",
            providers: [.apt(["libsystemd-dev"])]
        ),
        // The launcher's child in C (clone to execve with raw system calls), a translation unit of its own compiled
        // with _GNU_SOURCE.
        .target(name: "CLauncher", cSettings: [.define("_GNU_SOURCE")]),
        // The POSIX layer, with no libsystemd: errno and the syscall helper, descriptors, sockets, clocks, threads,
        // pidfds, spawning, users, resource limits and /proc parsing. The client library needs nothing more.
        .target(name: "BGTaskPOSIX", dependencies: ["BGTaskVocabulary", "CPOSIX"]),
        // The Linux and systemd layer above it: the sd-event loop, sd_notify, the journal, cgroups, memory pressure,
        // the launcher, and the service manager's client over sd-bus.
        .target(
            name: "BGTaskSystem", dependencies: ["BGTaskPOSIX", "BGTaskVocabulary", "CLauncher", "CPOSIX", "CSystemd"]),
        // bgtaskd.conf: systemd value syntax, INI parsing, the typed configuration, loading and --dump-config.
        .target(name: "BGTaskConfig", dependencies: ["BGTaskCore"]),
        // JSON without Foundation: the parser, the value tree, and the Codable encoder and decoder over it.
        .target(name: "BGTaskJSON"),
        // The Varlink IDL: the grammar of names, the parser and its model, standard library only, so that the build
        // tool can use it as well as the codec.
        .target(name: "VarlinkIDL"),
        // The Varlink wire protocol: framing, the codec, the interface's Codable types and errors. The `.varlink`
        // files in the target are the source of truth; the plugin embeds them as strings and generates the wire
        // types of each one with a `.bindings` file.
        .target(
            name: "BGTaskProtocol", dependencies: ["BGTaskJSON", "BGTaskVocabulary", "VarlinkIDL"],
            plugins: ["EmbedInterface"]),
        // docs/PROTOCOL.md generated from the parsed interfaces, and JSON values checked against them: for tests and
        // docs, not linked into the daemon.
        .target(name: "BGTaskIDL", dependencies: ["BGTaskJSON", "BGTaskProtocol", "VarlinkIDL"]),
        // Build-time tool behind the plugin: turns one `.varlink` file into a Swift string constant, and with its
        // bindings into the interface's wire types.
        .executableTarget(name: "EmbedInterfaceTool", dependencies: ["VarlinkIDL"]),
        // Build-tool plugin: runs EmbedInterfaceTool on every `.varlink` file of the target that uses it.
        .plugin(name: "EmbedInterface", capability: .buildTool(), dependencies: ["EmbedInterfaceTool"]),
        // The client library: socket resolution, a blocking Varlink connection, typed calls, and
        // BackgroundApplication, the UIApplication-shaped API apps use.
        .target(name: "BGTaskClient", dependencies: ["BGTaskJSON", "BGTaskPOSIX", "BGTaskProtocol"]),
        // A scriptable app for end-to-end tests: stdin commands in, one stdout line per outcome or event.
        .executableTarget(
            name: "BGTaskFixtureApp", dependencies: ["BGTaskClient", "BGTaskJSON", "BGTaskPOSIX"],
            path: "Tests/Fixtures/FixtureApp"
        ),
        // The example app of the client library: an upload that finishes in background under a lease.
        .executableTarget(name: "PhotoUploader", dependencies: ["BGTaskClient"], path: "Examples/PhotoUploader"),
        // The daemon: the manager wiring the core to Linux, the Varlink server, the action executor.
        .target(
            name: "BGTaskDaemon",
            dependencies: [
                "BGTaskArguments", "BGTaskConfig", "BGTaskCore", "BGTaskJSON", "BGTaskPOSIX", "BGTaskProtocol",
                "BGTaskSystem",
            ]),
        .executableTarget(
            name: "bgtaskd", dependencies: ["BGTaskConfig", "BGTaskDaemon", "BGTaskPOSIX", "BGTaskSystem"]),
        // A small argument-parsing framework in the shape of swift-argument-parser: specs as data, a parser, help,
        // usage errors and man pages generated from the specs.
        .target(name: "BGTaskArguments"),
        // Supervising children: a command run the way timeout(1) runs it (the supervision behind bgtask run), and a
        // private service under timeout(1), ready on READY=1 (the demo's and the benchmarks' bgtaskd).
        .target(name: "BGTaskSupervision", dependencies: ["BGTaskPOSIX"]),
        // The bgtask command line: its subcommands (one file each), which talk to the daemon through the client
        // library, and the rendering of the daemon's replies.
        .target(
            name: "BGTaskCLI",
            dependencies: [
                "BGTaskArguments", "BGTaskClient", "BGTaskConfig", "BGTaskJSON", "BGTaskPOSIX", "BGTaskProtocol",
                "BGTaskSupervision",
            ]
        ),
        // The sample app of `bgtask demo`: a BackgroundApplication configured by its arguments, printing one line
        // per thing it experiences.
        .target(name: "BGTaskDemoApp", dependencies: ["BGTaskClient", "BGTaskJSON"]),
        .executableTarget(name: "bgtask-demo-app", dependencies: ["BGTaskDemoApp"]),
        // `bgtask demo`: a private daemon, sample apps, and the scenes narrated with real output (the DemoRunner).
        .target(
            name: "BGTaskDemo",
            dependencies: [
                "BGTaskArguments", "BGTaskCLI", "BGTaskClient", "BGTaskPOSIX", "BGTaskSupervision", "BGTaskSystem",
            ]),
        // The bgtask executable: hands the command line to BGTaskCLI, with the demo plugged in.
        .executableTarget(name: "bgtask", dependencies: ["BGTaskCLI", "BGTaskDemo"]),
        // A systemd user manager contained in a private mount namespace and cgroups of its own: for the service
        // tests and `bgtask-soak --systemd`.
        .target(name: "BGTaskContainedSystemd", dependencies: ["BGTaskPOSIX"]),
        // SplitMix64 seeded once, for the tests' randomized inputs and the soak's replayable schedule.
        .target(name: "BGTaskSeededRandom"),
        // Test helpers shared by every test target: manual clock and loop, fakes, harnesses.
        .target(
            name: "BGTaskTestSupport",
            dependencies: [
                "BGTaskContainedSystemd", "BGTaskCore", "BGTaskJSON", "BGTaskPOSIX", "BGTaskProtocol",
                "BGTaskSeededRandom", "BGTaskSystem",
            ]),
        // Test fixture: sends one raw Varlink call, for calls made as another user.
        .executableTarget(name: "BGTaskRawCall", dependencies: ["BGTaskPOSIX"], path: "Tests/Fixtures/RawCall"),
        // Test fixture: one ProcessLauncher launch from a descriptor table the tests arrange (streams at 0, 1 or 2,
        // descriptors left open), under a seccomp filter when the tests want the launcher's fallbacks.
        .executableTarget(
            name: "BGTaskLaunchProbe", dependencies: ["BGTaskPOSIX", "BGTaskSystem"], path: "Tests/Fixtures/LaunchProbe"
        ),
        // Test fixture: floods of connections, registrations, bytes and calls, for hostile peers of another uid.
        .executableTarget(
            name: "BGTaskHostileClient", dependencies: ["BGTaskPOSIX"], path: "Tests/Fixtures/HostileClient"),
        // Measurements of a running bgtaskd under load (the deadline benchmark), shared by bgtask-bench and the
        // tests that assert on them; `reclaim --systemd` runs the daemon under a contained systemd manager.
        .target(
            name: "BGTaskBenchmarks",
            dependencies: [
                "BGTaskClient", "BGTaskConfig", "BGTaskContainedSystemd", "BGTaskJSON", "BGTaskPOSIX",
                "BGTaskProtocol", "BGTaskSupervision", "BGTaskSystem", "CPOSIX",
            ]),
        // The soak test's invariant checker: evidence gathered outside the daemon in, a report of violations out.
        .target(name: "BGTaskSoak", dependencies: ["BGTaskJSON", "BGTaskProtocol"]),
        // The soak harness: the synthetic apps, the daemon under fault (run by the harness, or by a contained systemd
        // manager), the evidence gathered outside it, and the run's report around the checker's.
        .target(
            name: "BGTaskSoakHarness",
            dependencies: [
                "BGTaskClient", "BGTaskContainedSystemd", "BGTaskJSON", "BGTaskPOSIX", "BGTaskProtocol",
                "BGTaskSeededRandom", "BGTaskSoak", "BGTaskSystem",
            ]),
        // The soak's command line; re-runs itself as the synthetic apps and the hostile client.
        .executableTarget(name: "bgtask-soak", dependencies: ["BGTaskPOSIX", "BGTaskSoakHarness"]),
        // Benchmarks; build with `swift build -c release` (every product: ipc and deadlines start the bgtaskd built
        // beside it, and say so when it is missing).
        .executableTarget(
            name: "bgtask-bench", dependencies: ["BGTaskBenchmarks", "BGTaskCore", "BGTaskPOSIX", "BGTaskSystem"]),
        .testTarget(name: "BGTaskCoreTests", dependencies: ["BGTaskCore", "BGTaskTestSupport"]),
        .testTarget(name: "BGTaskArgumentsTests", dependencies: ["BGTaskArguments"]),
        .testTarget(
            name: "BGTaskSoakTests", dependencies: ["BGTaskJSON", "BGTaskProtocol", "BGTaskSoak", "BGTaskTestSupport"]),
        // Runs the built bgtask-soak against the built bgtaskd (a minute, 50 apps, every fault), so it depends on
        // both executables.
        .testTarget(
            name: "BGTaskSoakRunTests",
            dependencies: ["BGTaskPOSIX", "BGTaskSoakHarness", "BGTaskTestSupport", "bgtaskd", "bgtask-soak"]),
        .testTarget(
            name: "BGTaskSupervisionTests", dependencies: ["BGTaskPOSIX", "BGTaskSupervision", "BGTaskTestSupport"]),
        // docs/ARCHITECTURE.md's module table against this manifest and the sources' imports.
        .testTarget(name: "BGTaskArchitectureTests", dependencies: ["BGTaskTestSupport"]),
        // CSystemd: the sd-bus message tests build messages of types the library never sends. Depends on the launch
        // fixture it runs as a process, so it is built before the tests.
        .testTarget(
            name: "BGTaskSystemTests",
            dependencies: [
                "BGTaskPOSIX", "BGTaskSystem", "BGTaskTestSupport", "CPOSIX", "CSystemd", "BGTaskLaunchProbe",
            ]),
        .testTarget(name: "BGTaskConfigTests", dependencies: ["BGTaskConfig", "BGTaskCore", "BGTaskTestSupport"]),
        .testTarget(
            name: "BGTaskProtocolTests",
            dependencies: ["BGTaskIDL", "BGTaskJSON", "BGTaskPOSIX", "BGTaskProtocol", "BGTaskTestSupport"]),
        // Runs the deadline and reclaim benchmarks at a small size against the real daemon, so it depends on the
        // executables (bgtask-bench re-runs itself as the apps' processes and as the status flooder; reclaim
        // --systemd installs bgtaskd and bgtask).
        .testTarget(
            name: "BGTaskBenchmarkTests",
            dependencies: [
                "BGTaskBenchmarks", "BGTaskPOSIX", "BGTaskSystem", "BGTaskTestSupport", "bgtaskd", "bgtask",
                "bgtask-bench",
            ]),
        // Depends on the executables it runs as processes (the daemon, the fixture, the example), so they are
        // built before the tests.
        .testTarget(
            name: "BGTaskClientTests",
            dependencies: [
                "BGTaskClient", "BGTaskJSON", "BGTaskPOSIX", "BGTaskProtocol", "BGTaskTestSupport", "bgtaskd",
                "BGTaskFixtureApp", "PhotoUploader",
            ]),
        .testTarget(
            name: "BGTaskDaemonTests",
            dependencies: [
                "BGTaskBenchmarks", "BGTaskConfig", "BGTaskCore", "BGTaskDaemon", "BGTaskIDL", "BGTaskJSON",
                "BGTaskPOSIX", "BGTaskProtocol", "BGTaskSystem", "BGTaskTestSupport", "bgtaskd", "BGTaskRawCall",
                "bgtask-bench",
            ]),
        // bgtaskd installed with scripts/install and run by a contained systemd user manager; depends on the
        // executables it installs and runs.
        .testTarget(
            name: "BGTaskServiceTests",
            dependencies: [
                "BGTaskJSON", "BGTaskPOSIX", "BGTaskProtocol", "BGTaskTestSupport", "bgtaskd", "bgtask",
                "BGTaskFixtureApp",
            ]),
        // Hostile peers against the real daemon: every bound on what a client can make the daemon hold, each with
        // the daemon's vitals checked. Depends on the executables it runs as processes (the daemon, the hostile
        // client), so they are built before the tests.
        .testTarget(
            name: "BGTaskHostileClientTests",
            dependencies: [
                "BGTaskJSON", "BGTaskPOSIX", "BGTaskProtocol", "BGTaskTestSupport", "bgtaskd", "BGTaskHostileClient",
            ]),
        // Depends on the executables it runs as processes (bgtask, and bgtaskd for the end-to-end tests), so they
        // are built before the tests. The help snapshots are read through the source path, not bundled.
        .testTarget(
            name: "BGTaskCLITests",
            dependencies: [
                "BGTaskArguments", "BGTaskCLI", "BGTaskIDL", "BGTaskJSON", "BGTaskPOSIX", "BGTaskProtocol",
                "BGTaskTestSupport", "bgtask", "bgtaskd",
            ],
            exclude: ["Snapshots"]
        ),
        // Runs the real `bgtask demo` end to end, so it depends on the three executables the demo runs.
        .testTarget(
            name: "BGTaskDemoTests",
            dependencies: [
                "BGTaskConfig", "BGTaskDemo", "BGTaskDemoApp", "BGTaskPOSIX", "BGTaskSystem", "BGTaskTestSupport",
                "bgtask", "bgtaskd", "bgtask-demo-app",
            ]),
    ]
)
