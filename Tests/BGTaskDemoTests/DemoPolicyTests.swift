// The demo's policy: the range of --background-time it accepts, and a configuration the daemon's parser takes as is.
import BGTaskConfig
import Foundation
import Testing

@testable import BGTaskDemo

@Suite("bgtask demo policy")
struct DemoPolicyTests {
    @Test(arguments: [
        (Duration.seconds(6), true), (.seconds(3), true), (.seconds(600), true), (.milliseconds(2_999), false),
        (.seconds(601), false), (.zero, false), (.seconds(-5), false), (.seconds(1_000_000), false),
    ])
    func acceptsBackgroundTimesTheScenesFit(_ backgroundTime: Duration, _ isAccepted: Bool) {
        let policy = try? DemoPolicy(backgroundTime: backgroundTime)
        #expect((policy != nil) == isAccepted)
        guard let policy else { return }
        // The warning comes after the start and before the end, and the upload ends before the warning.
        #expect(policy.expirationWarning > .zero && policy.expirationWarning < backgroundTime)
        #expect(policy.uploadLength > .zero && policy.uploadLength < backgroundTime - policy.expirationWarning)
    }

    @Test(arguments: [Duration.seconds(3), .seconds(6), .milliseconds(7_250), .seconds(60), .seconds(600)])
    func writesAConfigurationTheDaemonReadsWithoutComplaint(_ backgroundTime: Duration) throws {
        let policy = try DemoPolicy(backgroundTime: backgroundTime)
        let loaded = try Self.load(policy.configuration())
        let app = loaded.configuration.core.defaultAppPolicy
        #expect(app.backgroundTime == policy.backgroundTime)
        #expect(app.expirationWarning == policy.expirationWarning)
        #expect(app.enterBackgroundGrace == policy.enterBackgroundGrace)
        #expect(app.willTerminateGrace == policy.willTerminateGrace)
        #expect(loaded.configuration.memory.warningGrace == policy.memoryWarningGrace)
        #expect(loaded.configuration.memory.appsMemoryMaxBytes == UInt64(policy.appsMemoryMaxMebibytes) << 20)
        #expect(loaded.configuration.memory.cgroupRoot == nil && loaded.configuration.memory.memoryCgroupRoot == nil)
    }

    @Test("hands the daemon the cgroups the demo made, in its [Memory] section")
    func namesTheDemoCgroups() throws {
        let policy = try DemoPolicy(backgroundTime: .seconds(6))
        let control = "/sys/fs/cgroup/unified/bgtask-demo-1-2"
        let memory = "/sys/fs/cgroup/memory/bgtask-demo-1-2"
        let loaded = try Self.load(policy.configuration(cgroupRoot: control, memoryCgroupRoot: memory))
        #expect(loaded.configuration.memory.cgroupRoot == control)
        #expect(loaded.configuration.memory.memoryCgroupRoot == memory)
        #expect(loaded.configuration.memory.appsMemoryMaxBytes == UInt64(policy.appsMemoryMaxMebibytes) << 20)
    }

    /// `configuration` as the daemon loads it from a file, which must raise no diagnostic.
    static func load(_ configuration: String) throws -> ConfigurationLoadResult {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bgtask-demo-policy-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("bgtaskd.conf").path
        try Data(configuration.utf8).write(to: URL(fileURLWithPath: path))
        let loaded = ConfigurationLoader(path: path, daemonUserID: geteuid()).load()
        #expect(loaded.diagnostics.isEmpty, "\(loaded.diagnostics)")
        #expect(loaded.refused.isEmpty, "\(loaded.refused)")
        return loaded
    }

    @Test(arguments: [
        (0.0, "0.00s"), (3.456, "3.45s"), (-1.0, "0.00s"), (10.0, "10.00s"), (0.05, "0.05s"), (59.999, "59.99s"),
    ])
    func secondsAreShownRoundedDown(_ value: Double, _ shown: String) {
        #expect(Transcript.seconds(value) == shown)
    }
}
