// Loading a real tree from a temporary directory through the real file system, including unreadable files, and the
// trust rule on real owners, modes, symbolic links, FIFOs and devices.

import BGTaskConfig
import BGTaskTestSupport
import Foundation
import Glibc
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
    let real = ConfigurationLoader(path: mainFile, daemonUserID: geteuid(), fileSystem: LocalFileSystem()).load()
    let memory = ConfigurationLoader(
        path: mainFile, daemonUserID: geteuid(),
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
    let result = ConfigurationLoader(path: directory.path + "/bgtaskd.conf", daemonUserID: geteuid()).load()
    #expect(result.configuration == DaemonConfiguration())
    #expect(result.diagnostics.isEmpty)
    #expect(result.refused.isEmpty)
    #expect(LocalFileSystem().lookUp(directory.path + "/missing") == .missing)
    #expect(LocalFileSystem().lookUp(directory.path + "/missing/deeper") == .missing)
    #expect(try LocalFileSystem().readFile(atPath: directory.path + "/missing") { _ in true } == nil)
    #expect(try LocalFileSystem().namesInDirectory(atPath: directory.path + "/missing") == nil)
    // Nor does a configuration root that does not exist.
    let nowhere = ConfigurationLoader(path: directory.path + "/none/bgtaskd.conf", daemonUserID: geteuid()).load()
    #expect(nowhere.configuration == DaemonConfiguration() && nowhere.diagnostics.isEmpty && nowhere.refused.isEmpty)
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
    let result = ConfigurationLoader(path: mainFile, daemonUserID: geteuid()).load()
    #expect(
        places(result) == [
            "\(directory.path)/apps.d/huge.conf:-: error", "\(directory.path)/apps.d/latin1.conf:-: error",
        ])
    let messages = result.diagnostics.map(\.message)
    #expect(messages[0].contains("larger than 1M"))
    #expect(messages[1].contains("not valid UTF-8"))
    // A directory where the main file belongs and a file where the drop-ins' directory belongs are refused.
    #expect(
        result.refused.map(\.description) == [
            "\(mainFile): a directory, not a regular file", "\(mainFile).d: a regular file, not a directory",
        ])
    #expect(result.configuration.core.appPolicies.keys.sorted() == ["fits"])
}

// MARK: The trust rule on real files

/// What a row expects of `apps.d/mail.conf`: read, or refused, as itself or with `apps.d`, for this reason.
enum RealVerdict: Equatable, CustomStringConvertible {
    case read
    /// Refused: each file or directory refused, as `PATH: reason`.
    case refused([String])
    /// Refused for a reason starting with this text and containing the other.
    case refusedLike(path: String, prefix: String, containing: String)

    var description: String {
        switch self {
        case .read: "read"
        case .refused(let refusals): "refused: \(refusals)"
        case .refusedLike(let path, let prefix, let containing): "\(path) refused: \(prefix)…\(containing)…"
        }
    }
}

/// A row on real files: the configuration root holds `bgtaskd.conf` and `apps.d/mail.conf` (root, 0644, in root's
/// 0755 directories), which `change` alters with real system calls, given the root and a scratch directory outside
/// it; it returns what the loader, for a daemon running as `daemonUserID`, must make of the app file.
struct RealTrustRow: CustomTestStringConvertible, Sendable {
    let name: String
    var daemonUserID: UInt32 = 0
    let change: @Sendable (_ root: String, _ elsewhere: String) throws -> RealVerdict

    var testDescription: String { name }
}

/// Fails the test with the call's error when a system call fails.
func check(_ result: Int32, _ what: String) throws {
    guard result == 0 else { throw HarnessError("\(what): \(String(cString: strerror(errno)))") }
}

let realTrustRows: [RealTrustRow] = [
    RealTrustRow(name: "root, 0644") { _, _ in .read },
    RealTrustRow(name: "mode 0666") { root, _ in
        try check(chmod(root + "/apps.d/mail.conf", 0o666), "chmod")
        return .refused(["\(root)/apps.d/mail.conf: writable by group and others (mode 0666)"])
    },
    RealTrustRow(name: "mode 0664 with a non-root group") { root, _ in
        try check(chown(root + "/apps.d/mail.conf", 0, 100), "chown")
        try check(chmod(root + "/apps.d/mail.conf", 0o664), "chmod")
        return .refused(["\(root)/apps.d/mail.conf: writable by group (mode 0664)"])
    },
    RealTrustRow(name: "mode 0620") { root, _ in
        try check(chmod(root + "/apps.d/mail.conf", 0o620), "chmod")
        return .refused(["\(root)/apps.d/mail.conf: writable by group (mode 0620)"])
    },
    RealTrustRow(name: "owned by nobody") { root, _ in
        try check(chown(root + "/apps.d/mail.conf", 65534, 65534), "chown")
        return .refused(["\(root)/apps.d/mail.conf: owned by uid 65534, not root"])
    },
    RealTrustRow(name: "apps.d 0777") { root, _ in
        try check(chmod(root + "/apps.d", 0o777), "chmod")
        return .refused(["\(root)/apps.d: writable by group and others (mode 0777)"])
    },
    RealTrustRow(name: "apps.d sticky 1777") { root, _ in
        try check(chmod(root + "/apps.d", 0o1777), "chmod")
        return .refused(["\(root)/apps.d: writable by group and others (mode 1777)"])
    },
    RealTrustRow(name: "apps.d owned by nobody") { root, _ in
        try check(chown(root + "/apps.d", 65534, 65534), "chown")
        return .refused(["\(root)/apps.d: owned by uid 65534, not root"])
    },
    RealTrustRow(name: "the root group-writable") { root, _ in
        try check(chmod(root, 0o775), "chmod")
        let reason = "its directory \(root) is writable by group (mode 0775)"
        // Even the drop-ins' directory, which does not exist: anyone in the group could make it.
        return .refused([
            "\(root)/bgtaskd.conf: \(reason)", "\(root)/bgtaskd.conf.d: \(reason)", "\(root)/apps.d: \(reason)",
        ])
    },
    RealTrustRow(name: "a relative symlink inside the root") { root, _ in
        try check(mkdir(root + "/shared", 0o755), "mkdir")
        try check(rename(root + "/apps.d/mail.conf", root + "/shared/mail.conf"), "rename")
        try check(symlink("../shared/mail.conf", root + "/apps.d/mail.conf"), "symlink")
        return .read
    },
    RealTrustRow(name: "a symlink into a world-writable directory") { root, elsewhere in
        try check(chmod(elsewhere, 0o777), "chmod")
        try check(rename(root + "/apps.d/mail.conf", elsewhere + "/mail.conf"), "rename")
        try check(symlink(elsewhere + "/mail.conf", root + "/apps.d/mail.conf"), "symlink")
        // Whichever directory from / down fails first (/tmp itself, sticky, or the scratch one) is named.
        return .refusedLike(
            path: root + "/apps.d/mail.conf", prefix: "a symlink to \(elsewhere)/mail.conf, whose directory ",
            containing: "is writable by group and others (mode ")
    },
    RealTrustRow(name: "a symlink to a file in a trusted place outside the root") { root, _ in
        // /run and / are root's, 0755, on every Linux system; the scratch directory in it is made 0755.
        var template = Array("/run/bgtaskd-trusted-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw HarnessError("mkdtemp in /run: \(errno)") }
        let trusted = String(cString: made)
        try check(rename(root + "/apps.d/mail.conf", trusted + "/mail.conf"), "rename")
        try check(symlink(trusted + "/mail.conf", root + "/apps.d/mail.conf"), "symlink")
        return .read
    },
    RealTrustRow(name: "a symlink loop") { root, _ in
        try check(unlink(root + "/apps.d/mail.conf"), "unlink")
        try check(symlink("loop", root + "/apps.d/mail.conf"), "symlink")
        try check(symlink("mail.conf", root + "/apps.d/loop"), "symlink")
        return .refused(["\(root)/apps.d/mail.conf: a symlink to loop: too many levels of symbolic links (a loop?)"])
    },
    RealTrustRow(name: "a FIFO, refused without blocking") { root, _ in
        try check(unlink(root + "/apps.d/mail.conf"), "unlink")
        try check(mkfifo(root + "/apps.d/mail.conf", 0o644), "mkfifo")
        return .refused(["\(root)/apps.d/mail.conf: a FIFO, not a regular file"])
    },
    RealTrustRow(name: "a directory where the file belongs") { root, _ in
        try check(unlink(root + "/apps.d/mail.conf"), "unlink")
        try check(mkdir(root + "/apps.d/mail.conf", 0o755), "mkdir")
        return .refused(["\(root)/apps.d/mail.conf: a directory, not a regular file"])
    },
    RealTrustRow(name: "a symlink to a device") { root, _ in
        try check(unlink(root + "/apps.d/mail.conf"), "unlink")
        try check(symlink("/dev/null", root + "/apps.d/mail.conf"), "symlink")
        return .refused([
            "\(root)/apps.d/mail.conf: a symlink to /dev/null, which is a character device, not a regular file"
        ])
    },
    RealTrustRow(name: "a per-user daemon's own files", daemonUserID: 4242) { root, _ in
        for path in [root, root + "/apps.d", root + "/apps.d/mail.conf"] { try check(chown(path, 4242, 4242), "chown") }
        return .read
    },
    RealTrustRow(name: "another user's file, for a per-user daemon", daemonUserID: 4242) { root, _ in
        try check(chown(root + "/apps.d/mail.conf", 4243, 4243), "chown")
        return .refused(["\(root)/apps.d/mail.conf: owned by uid 4243, not root or uid 4242 (the daemon's user)"])
    },
    RealTrustRow(name: "a per-user daemon's own file, group-writable", daemonUserID: 4242) { root, _ in
        try check(chown(root + "/apps.d/mail.conf", 4242, 4242), "chown")
        try check(chmod(root + "/apps.d/mail.conf", 0o664), "chmod")
        return .refused(["\(root)/apps.d/mail.conf: writable by group (mode 0664)"])
    },
]

@Test(.requires(.root(for: "changing owners of real files")), arguments: realTrustRows)
func theTrustRuleOnRealFiles(_ row: RealTrustRow) throws {
    let directory = try ScratchDirectory(prefix: "bgtaskd-trust")
    let elsewhere = try ScratchDirectory(prefix: "bgtaskd-trust-elsewhere")
    let root = directory.path + "/config"
    try FileManager.default.createDirectory(atPath: root + "/apps.d", withIntermediateDirectories: true)
    try check(chmod(root, 0o755), "chmod")
    try check(chmod(root + "/apps.d", 0o755), "chmod")
    try Data("[Limits]\nHistorySize=7\n".utf8).write(to: URL(fileURLWithPath: root + "/bgtaskd.conf"))
    try Data("[Launch]\nExecStart=/usr/bin/mail-sync\n".utf8).write(
        to: URL(fileURLWithPath: root + "/apps.d/mail.conf"))
    let expected = try row.change(root, elsewhere.path)
    defer {
        // The trusted place outside the root, when the row made one, goes with the link to it.
        var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink(root + "/apps.d/mail.conf", &target, target.count - 1)
        if count > 0, let path = String(validating: target[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self),
            path.hasPrefix("/run/bgtaskd-trusted-")
        {
            try? FileManager.default.removeItem(atPath: String(path.dropLast("/mail.conf".count)))
        }
    }
    let result = ConfigurationLoader(path: root + "/bgtaskd.conf", daemonUserID: row.daemonUserID).load()
    #expect(result.diagnostics.isEmpty, "\(result.diagnostics)")
    switch expected {
    case .read:
        #expect(result.filesRead == [root + "/bgtaskd.conf", root + "/apps.d/mail.conf"])
        #expect(result.refused.isEmpty, "\(result.refused)")
        #expect(result.configuration.launch.appCommands == ["mail": ["/usr/bin/mail-sync"]])
    case .refused(let refusals):
        #expect(result.refused.map(\.description) == refusals)
        #expect(result.configuration.launch.appCommands.isEmpty)
    case .refusedLike(let path, let prefix, let containing):
        #expect(result.refused.count == 1)
        let refused = try #require(result.refused.first)
        #expect(refused.path == path)
        #expect(refused.refusal.description.hasPrefix(prefix), "\(refused)")
        #expect(refused.refusal.description.contains(containing), "\(refused)")
        #expect(result.configuration.launch.appCommands.isEmpty)
    }
    // The main file beside the app file is read whatever became of the app file, unless it is refused too.
    let isMainRefused = result.refused.contains { $0.path == root + "/bgtaskd.conf" }
    #expect(result.configuration.core.historySize == (isMainRefused ? DaemonConfiguration().core.historySize : 7))
}

/// A file system whose file is replaced between the check and the open: the descriptor's status is another file's.
struct SwappingFileSystem: ConfigurationFileSystem {
    var tree: InMemoryFileSystem
    func lookUp(_ path: String) -> PathLookup { tree.lookUp(path) }
    func readFile(atPath path: String, accepting accept: (FileStatus) -> Bool) throws(FileSystemError) -> FileRead? {
        guard case .found(var entry) = tree.lookUp(path), let text = tree.files[path] else {
            return try tree.readFile(atPath: path, accepting: accept)
        }
        // Another inode, as a rename over the checked file would give.
        entry.status.inode += 1
        return accept(entry.status) ? .read(entry.status, text) : .declined(entry.status)
    }
    func namesInDirectory(atPath path: String) throws(FileSystemError) -> [String]? {
        try tree.namesInDirectory(atPath: path)
    }
    func workingDirectory() -> String { "/" }
}

@Test func aFileReplacedBetweenTheCheckAndTheOpenIsRefused() {
    let tree = InMemoryFileSystem(files: ["/etc/bgtaskd/apps.d/mail.conf": "[Launch]\nExecStart=/bin/true\n"])
    let result = ConfigurationLoader(
        path: "/etc/bgtaskd/bgtaskd.conf", daemonUserID: 0, fileSystem: SwappingFileSystem(tree: tree)
    ).load()
    #expect(
        result.refused.map(\.description) == [
            "/etc/bgtaskd/apps.d/mail.conf: was replaced while it was being checked"
        ])
    #expect(result.configuration.launch.appCommands.isEmpty)
}
