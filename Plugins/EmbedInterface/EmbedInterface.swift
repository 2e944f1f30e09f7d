// Build-tool plugin that embeds each `.varlink` interface file of a target as a Swift string constant.
import Foundation
import PackagePlugin

/// Runs `EmbedInterfaceTool` once per `.varlink` file, so the compiled module carries the file's exact text.
///
/// The `.varlink` file stays the single source of truth: the daemon serves the generated constant for
/// `org.varlink.service.GetInterfaceDescription`, and the build regenerates it whenever the file changes.
@main
struct EmbedInterface: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        guard let sourceTarget = target as? SourceModuleTarget else { return [] }
        let tool = try context.tool(named: "EmbedInterfaceTool")
        return sourceTarget.sourceFiles(withSuffix: "varlink").map { file in
            let output = context.pluginWorkDirectoryURL
                .appendingPathComponent(file.url.deletingPathExtension().lastPathComponent + ".swift")
            return .buildCommand(
                displayName: "Embedding \(file.url.lastPathComponent)",
                executable: tool.url,
                arguments: [file.url.path, output.path],
                inputFiles: [file.url],
                outputFiles: [output]
            )
        }
    }
}
