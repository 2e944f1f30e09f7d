// swift-tools-version:6.0
// bgtaskd: iOS-style background execution for Linux apps.
import PackageDescription

let package = Package(
    name: "bgtaskd",
    products: [
        .library(name: "BGTaskCore", targets: ["BGTaskCore"]),
        .library(name: "BGTaskConfig", targets: ["BGTaskConfig"]),
    ],
    targets: [
        // The lifecycle and lease policy: a pure state machine, standard library only.
        .target(name: "BGTaskCore"),
        // bgtaskd.conf: systemd value syntax, INI parsing, the typed configuration, loading and --dump-config.
        .target(name: "BGTaskConfig", dependencies: ["BGTaskCore"]),
        .testTarget(name: "BGTaskConfigTests", dependencies: ["BGTaskConfig", "BGTaskCore"]),
    ]
)
