// swift-tools-version:6.0
// bgtaskd: iOS-style background execution for Linux apps.
import PackageDescription

let package = Package(
    name: "bgtaskd",
    products: [
        .library(name: "BGTaskCore", targets: ["BGTaskCore"]),
        .library(name: "BGTaskSystem", targets: ["BGTaskSystem"]),
    ],
    targets: [
        // The lifecycle and lease policy: a pure state machine, standard library only.
        .target(name: "BGTaskCore"),
        // libsystemd (sd-daemon, sd-event, sd-journal) plus inline wrappers for syscalls Swift cannot call.
        .systemLibrary(
            name: "CSystemd",
            pkgConfig: "libsystemd",
            providers: [.apt(["libsystemd-dev"])]
        ),
        // The typed Linux layer: descriptors, pidfds, sockets, procfs, the sd-event loop, sd_notify, journal.
        .target(name: "BGTaskSystem", dependencies: ["CSystemd"]),
        .testTarget(name: "BGTaskSystemTests", dependencies: ["BGTaskSystem"]),
    ]
)
