// Where the demo finds the daemon and the sample app: next to the running bgtask, as built or installed together.
import Foundation

/// The executables the demo runs, found in the directory of the running `bgtask` (`/proc/self/exe`).
struct DemoProducts {
    /// `bgtaskd`.
    var daemon: String
    /// `bgtask-demo-app`.
    var sampleApp: String

    /// Finds both, or fails saying where they were looked for.
    static func locate() throws(DemoFailure) -> DemoProducts {
        guard let executable = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") else {
            throw DemoFailure("cannot read /proc/self/exe to find bgtaskd and bgtask-demo-app: is /proc mounted?")
        }
        let directory = URL(fileURLWithPath: executable).deletingLastPathComponent().path
        var found: [String] = []
        for name in ["bgtaskd", "bgtask-demo-app"] {
            let path = directory + "/" + name
            guard FileManager.default.isExecutableFile(atPath: path) else {
                throw DemoFailure(
                    "bgtask demo runs \(name) from bgtask's own directory, and there is no executable \(path): "
                        + "build the package (swift build) or install bgtask, bgtaskd and bgtask-demo-app together")
            }
            found.append(path)
        }
        return DemoProducts(daemon: found[0], sampleApp: found[1])
    }
}
