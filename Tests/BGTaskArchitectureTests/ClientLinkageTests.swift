// What an app linking the client library links: the package graph from BGTaskClient down, which must not reach
// libsystemd or the launcher.

import Testing

@Suite("Client linkage")
struct ClientLinkageTests {
    /// The chain of target dependencies from `start` to `goal` (both included), if there is one; breadth first, so
    /// the shortest.
    static func path(from start: String, to goal: String, in targets: [PackageTarget]) -> [String]? {
        let dependencies = Dictionary(uniqueKeysWithValues: targets.map { ($0.name, $0.dependencies) })
        var cameFrom: [String: String] = [:]
        var queue = [start]
        var seen: Set<String> = [start]
        while !queue.isEmpty {
            let current = queue.removeFirst()
            if current == goal {
                var chain = [goal]
                while let previous = cameFrom[chain[0]] { chain.insert(previous, at: 0) }
                return chain
            }
            for next in (dependencies[current] ?? []).sorted() where seen.insert(next).inserted {
                cameFrom[next] = current
                queue.append(next)
            }
        }
        return nil
    }

    @Test("no target dependency leads from BGTaskClient to CSystemd or CLauncher: an app needs no libsystemd")
    func clientReachesNoSystemd() throws {
        let targets = try ModuleGraphTests.packageTargets()
        let names = Set(targets.map(\.name))
        for name in ["BGTaskClient", "BGTaskPOSIX", "CSystemd", "CLauncher", "BGTaskSystem"] {
            try #require(names.contains(name), "dump-package lists no \(name)")
        }
        for forbidden in ["CSystemd", "CLauncher", "BGTaskSystem"] {
            let chain = Self.path(from: "BGTaskClient", to: forbidden, in: targets)
            #expect(chain == nil, "BGTaskClient reaches \(forbidden): \(chain?.joined(separator: " → ") ?? "")")
        }
        // The search itself finds a path where there is one.
        #expect(Self.path(from: "BGTaskSystem", to: "CSystemd", in: targets) == ["BGTaskSystem", "CSystemd"])
        #expect(Self.path(from: "BGTaskClient", to: "BGTaskPOSIX", in: targets) != nil)
    }
}
