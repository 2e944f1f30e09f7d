// swift-tools-version:6.0
// bgtaskd: iOS-style background execution for Linux apps.
import PackageDescription

let package = Package(
    name: "bgtaskd",
    products: [
        .library(name: "BGTaskCore", targets: ["BGTaskCore"]),
    ],
    targets: [
        // The lifecycle and lease policy: a pure state machine, standard library only.
        .target(name: "BGTaskCore"),
        // Test helpers shared by every test target: manual clock and loop, fakes, harnesses.
        .target(name: "BGTaskTestSupport", dependencies: ["BGTaskCore"]),
        .testTarget(name: "BGTaskCoreTests", dependencies: ["BGTaskCore", "BGTaskTestSupport"]),
    ]
)
