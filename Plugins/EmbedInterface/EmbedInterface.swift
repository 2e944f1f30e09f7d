// Build-tool plugin that embeds each `.varlink` interface file of a target as a Swift string constant, and
// generates the wire types of each one that has a `.bindings` file beside it.
import Foundation
import PackagePlugin

/// Runs `EmbedInterfaceTool` once per `.varlink` file, so the compiled module carries the file's exact text and,
/// where `NAME.bindings` says how to name them in Swift, the Codable types of its methods and declared types.
///
/// The `.varlink` file stays the single source of truth: the daemon serves the generated constant for
/// `org.varlink.service.GetInterfaceDescription`, the codec reads and writes the generated types, and the build
/// regenerates both whenever the file changes.
@main
struct EmbedInterface: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        guard let sourceTarget = target as? SourceModuleTarget else { return [] }
        let tool = try context.tool(named: "EmbedInterfaceTool")
        let bindings = sourceTarget.sourceFiles(withSuffix: "bindings").map(\.url)
        return sourceTarget.sourceFiles(withSuffix: "varlink").map { file in
            let baseName = file.url.deletingPathExtension().lastPathComponent
            let output = context.pluginWorkDirectoryURL.appendingPathComponent(baseName + ".swift")
            var arguments = [file.url.path, output.path]
            var inputs = [file.url]
            var outputs = [output]
            if let binding = bindings.first(where: { $0.deletingPathExtension().lastPathComponent == baseName }) {
                let types = context.pluginWorkDirectoryURL.appendingPathComponent(baseName + "+WireTypes.swift")
                arguments += [binding.path, types.path]
                inputs.append(binding)
                outputs.append(types)
            }
            return .buildCommand(
                displayName: "Embedding \(file.url.lastPathComponent)",
                executable: tool.url,
                arguments: arguments,
                inputFiles: inputs,
                outputFiles: outputs
            )
        }
    }
}
