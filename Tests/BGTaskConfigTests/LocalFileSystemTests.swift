// Loading a real tree from a temporary directory through the real file system, including unreadable files.

import BGTaskConfig
import BGTaskTestSupport
import Foundation
import Testing

/// A tree with every kind of file the loader meets, relative to the configuration directory.
let sampleTree: [String: String] = [
    "bgtaskd.conf": "[Policy]\nBackgroundTimeSec=2min\n[Limits]\nHistorySize=10\nBogusKey=1\n",
    "bgtaskd.conf.d/20-b.conf": "[Limits]\nHistorySize=20\n",
    "bgtaskd.conf.d/10-a.conf": "[Limits]\nHistorySize=15\nTasksPerAppMax=lots\n",
    "bgtaskd.conf.d/notes.txt": "[Limits]\nHistorySize=99\n",
    "apps.d/com.example.mail.conf": "[Policy]\nBackgroundTimeSec=30s\n",
    "apps.d/.hidden.conf": "[Policy]\nBackgroundTimeSec=1s\n",
]

@Test func aRealTreeLoadsLikeTheSameTreeInMemory() throws {
    let directory = try ScratchDirectory(prefix: "bgtaskd-config")
    defer { directory.remove() }
    for (path, text) in sampleTree {
        try directory.write(path, text)
    }
    let mainFile = directory.path + "/bgtaskd.conf"
    let real = ConfigurationLoader(path: mainFile, fileSystem: LocalFileSystem()).load()
    let memory = ConfigurationLoader(
        path: mainFile,
        fileSystem: InMemoryFileSystem(
            files: Dictionary(uniqueKeysWithValues: sampleTree.map { (directory.path + "/" + $0.key, $0.value) }))
    ).load()
    #expect(real == memory)

    #expect(real.configuration.core.historySize == 20)
    #expect(real.configuration.core.tasksPerAppMax == 64)
    #expect(real.configuration.core.defaultAppPolicy.backgroundTime == .seconds(120))
    #expect(real.configuration.core.appPolicies.keys.sorted() == ["com.example.mail"])
    #expect(real.configuration.core.appPolicy(for: "com.example.mail").backgroundTime == .seconds(30))
    #expect(
        places(real) == [
            "\(mainFile):5: warning", "\(directory.path)/bgtaskd.conf.d/10-a.conf:3: error",
            "\(directory.path)/apps.d/.hidden.conf:-: error",
        ])
    #expect(
        real.filesRead == [
            mainFile, "\(directory.path)/bgtaskd.conf.d/10-a.conf", "\(directory.path)/bgtaskd.conf.d/20-b.conf",
            "\(directory.path)/apps.d/com.example.mail.conf",
        ])
}

@Test func aMissingRealFileMeansDefaults() throws {
    let directory = try ScratchDirectory(prefix: "bgtaskd-config")
    defer { directory.remove() }
    let result = ConfigurationLoader(path: directory.path + "/bgtaskd.conf").load()
    #expect(result.configuration == DaemonConfiguration())
    #expect(result.diagnostics.isEmpty)
    #expect(try LocalFileSystem().contentsOfFile(atPath: directory.path + "/missing") == nil)
    #expect(try LocalFileSystem().namesInDirectory(atPath: directory.path + "/missing") == nil)
}

@Test func unreadableRealFilesAreErrors() throws {
    let directory = try ScratchDirectory(prefix: "bgtaskd-config")
    defer { directory.remove() }
    // Tests run as root, so permission bits cannot make a file unreadable: use what even root cannot read.
    try FileManager.default.createDirectory(
        atPath: directory.path + "/bgtaskd.conf", withIntermediateDirectories: false)  // a directory
    try directory.write("bgtaskd.conf.d", "a file where a directory belongs")
    try directory.write("apps.d/latin1.conf", Data([0x5B, 0x50, 0x6F, 0x6C, 0x69, 0x63, 0x79, 0x5D, 0x0A, 0xE9]))
    try directory.write("apps.d/huge.conf", Data(repeating: 0x23, count: LocalFileSystem.maximumFileBytes + 1))
    try directory.write("apps.d/fits.conf", Data(repeating: 0x23, count: LocalFileSystem.maximumFileBytes))
    let mainFile = directory.path + "/bgtaskd.conf"
    let result = ConfigurationLoader(path: mainFile).load()
    #expect(
        places(result) == [
            "\(mainFile):-: error", "\(mainFile).d:-: error", "\(directory.path)/apps.d/huge.conf:-: error",
            "\(directory.path)/apps.d/latin1.conf:-: error",
        ])
    let messages = result.diagnostics.map(\.message)
    #expect(messages[0].contains("Is a directory"))
    #expect(messages[1].contains("Not a directory"))
    #expect(messages[2].contains("larger than 1M"))
    #expect(messages[3].contains("not valid UTF-8"))
    #expect(result.configuration.core.appPolicies.keys.sorted() == ["fits"])
}
