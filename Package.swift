// swift-tools-version:6.0
// bgtaskd: iOS-style background execution for Linux apps.
import PackageDescription

let package = Package(
    name: "bgtaskd",
    products: [
        .library(name: "BGTaskCore", targets: ["BGTaskCore"]),
        .executable(name: "bgtask-bench", targets: ["bgtask-bench"]),
    ],
    targets: [
        // The lifecycle and lease policy: a pure state machine, standard library only.
        .target(name: "BGTaskCore"),
        // Test helpers shared by every test target: manual clock and loop, fakes, harnesses.
        .target(name: "BGTaskTestSupport", dependencies: ["BGTaskCore"]),
        // Benchmarks; build with `-c release`.
        .executableTarget(name: "bgtask-bench", dependencies: ["BGTaskCore"]),
        .testTarget(name: "BGTaskCoreTests", dependencies: ["BGTaskCore", "BGTaskTestSupport"]),
    ]
)
