// swift-tools-version:6.0
// bgtaskd: iOS-style background execution for Linux apps.
import PackageDescription

let package = Package(
    name: "bgtaskd",
    products: [
        .library(name: "BGTaskCore", targets: ["BGTaskCore"]),
        .library(name: "BGTaskProtocol", targets: ["BGTaskProtocol"]),
    ],
    targets: [
        // The lifecycle and lease policy: a pure state machine, standard library only.
        .target(name: "BGTaskCore"),
        // The Varlink wire protocol: framing, the interface's Codable types and errors, the IDL and its text.
        // The `.varlink` files in the target are the source of truth; the plugin embeds them as strings.
        .target(name: "BGTaskProtocol", plugins: ["EmbedInterface"]),
        // Build-time tool behind the plugin: turns one `.varlink` file into a Swift string constant.
        .executableTarget(name: "EmbedInterfaceTool"),
        // Build-tool plugin: runs EmbedInterfaceTool on every `.varlink` file of the target that uses it.
        .plugin(name: "EmbedInterface", capability: .buildTool(), dependencies: ["EmbedInterfaceTool"]),
        .testTarget(name: "BGTaskProtocolTests", dependencies: ["BGTaskProtocol"]),
    ]
)
