// The trust rule row by row, on in-memory trees: owners, modes, directories on the way, symbolic links in and out
// of the root, loops, and files that are not regular files; then the loader refusing what the rule refuses.

import BGTaskConfig
import Testing

/// The file the rows ask about, and the tree it lives in unless a row changes it.
private let appFile = "/etc/bgtaskd/apps.d/mail.conf"

/// What a row expects of the rule.
enum ExpectedVerdict: Equatable, CustomStringConvertible {
    /// Trusted, found at this path (no link in it).
    case trusted(String)
    case missing
    /// Refused, with this description.
    case refused(String)

    init(_ verdict: TrustVerdict) {
        switch verdict {
        case .trusted(let path, _): self = .trusted(path)
        case .missing: self = .missing
        case .refused(let refusal): self = .refused(refusal.description)
        }
    }

    var description: String {
        switch self {
        case .trusted(let path): "trusted at \(path)"
        case .missing: "missing"
        case .refused(let reason): "refused: \(reason)"
        }
    }
}

/// One row: a tree (the app file, root-owned 0644, in root-owned 0755 directories, plus the row's changes), the
/// daemon's uid, the path asked about and what the rule must say.
struct TrustRow: CustomTestStringConvertible, Sendable {
    let name: String
    var daemonUserID: UInt32 = 0
    var root = "/etc/bgtaskd"
    var path = appFile
    var expecting = FileKind.regularFile
    var tree: InMemoryFileSystem
    let expected: ExpectedVerdict

    init(
        _ name: String, daemonUserID: UInt32 = 0, root: String = "/etc/bgtaskd", path: String = appFile,
        expecting: FileKind = .regularFile, _ change: (inout InMemoryFileSystem) -> Void, _ expected: ExpectedVerdict
    ) {
        self.name = name
        self.daemonUserID = daemonUserID
        self.root = root
        self.path = path
        self.expecting = expecting
        var tree = InMemoryFileSystem(files: [appFile: "[Policy]\n"])
        change(&tree)
        self.tree = tree
        self.expected = expected
    }

    /// A row on the tree as it is.
    init(
        _ name: String, daemonUserID: UInt32 = 0, root: String = "/etc/bgtaskd", path: String = appFile,
        expecting: FileKind = .regularFile, _ expected: ExpectedVerdict
    ) {
        self.init(
            name, daemonUserID: daemonUserID, root: root, path: path, expecting: expecting, { _ in }, expected)
    }

    var testDescription: String { name }

    func verdict() -> TrustVerdict {
        ConfigurationTrust(root: root, daemonUserID: daemonUserID).evaluate(path, expecting: expecting) {
            tree.lookUp($0)
        }
    }
}

/// `attributes` for a path: owner, group, mode.
private func owned(_ uid: UInt32, _ gid: UInt32 = 0, _ mode: UInt32) -> InMemoryFileSystem.Attributes {
    InMemoryFileSystem.Attributes(ownerID: uid, groupID: gid, mode: mode)
}

/// A tree with `/usr/share/bgtaskd/mail.conf` (root, 0644, root-owned 0755 directories above it).
private func withSharedFile(_ tree: inout InMemoryFileSystem) {
    tree.files["/usr/share/bgtaskd/mail.conf"] = "[Policy]\n"
}

/// Makes the app file a symbolic link to `target`.
private func link(_ path: String = appFile, to target: String) -> (inout InMemoryFileSystem) -> Void {
    { tree in
        tree.files[path] = nil
        tree.symbolicLinks[path] = target
    }
}

let trustRows: [TrustRow] = [
    // Owners and modes of the file itself.
    TrustRow("root-owned 0644", .trusted(appFile)),
    TrustRow("root-owned 0600", { $0.attributes[appFile] = owned(0, 0, 0o600) }, .trusted(appFile)),
    TrustRow("root-owned 0444, setgid left aside", { $0.attributes[appFile] = owned(0, 0, 0o2444) }, .trusted(appFile)),
    TrustRow(
        "mode 0666", { $0.attributes[appFile] = owned(0, 0, 0o666) },
        .refused("writable by group and others (mode 0666)")),
    TrustRow(
        "mode 0664 with a non-root group", { $0.attributes[appFile] = owned(0, 100, 0o664) },
        .refused("writable by group (mode 0664)")),
    TrustRow(
        "mode 0664 even with group root: members of group 0 are not root",
        { $0.attributes[appFile] = owned(0, 0, 0o664) },
        .refused("writable by group (mode 0664)")),
    TrustRow(
        "mode 0620: writable, not readable, by group", { $0.attributes[appFile] = owned(0, 100, 0o620) },
        .refused("writable by group (mode 0620)")),
    TrustRow(
        "mode 0602", { $0.attributes[appFile] = owned(0, 0, 0o602) }, .refused("writable by others (mode 0602)")),
    TrustRow(
        "owned by nobody", { $0.attributes[appFile] = owned(65534, 65534, 0o644) },
        .refused("owned by uid 65534, not root")),
    TrustRow(
        "owned by a user, for a root daemon", { $0.attributes[appFile] = owned(1000, 1000, 0o644) },
        .refused("owned by uid 1000, not root")),
    TrustRow(
        "owned by the daemon's user, for a per-user daemon", daemonUserID: 1000,
        { $0.attributes[appFile] = owned(1000, 1000, 0o644) }, .trusted(appFile)),
    TrustRow("owned by root, for a per-user daemon", daemonUserID: 1000, .trusted(appFile)),
    TrustRow(
        "owned by another user, for a per-user daemon", daemonUserID: 1000,
        { $0.attributes[appFile] = owned(1001, 1001, 0o644) },
        .refused("owned by uid 1001, not root or uid 1000 (the daemon's user)")),
    TrustRow(
        "owned by the daemon's user but group-writable, for a per-user daemon", daemonUserID: 1000,
        { $0.attributes[appFile] = owned(1000, 1000, 0o664) }, .refused("writable by group (mode 0664)")),

    // Directories on the way, up to the root and not above it.
    TrustRow(
        "apps.d 0777", { $0.attributes["/etc/bgtaskd/apps.d"] = owned(0, 0, 0o777) },
        .refused("its directory /etc/bgtaskd/apps.d is writable by group and others (mode 0777)")),
    TrustRow(
        "apps.d group-writable", { $0.attributes["/etc/bgtaskd/apps.d"] = owned(0, 100, 0o775) },
        .refused("its directory /etc/bgtaskd/apps.d is writable by group (mode 0775)")),
    TrustRow(
        "apps.d sticky 1777: the sticky bit excuses nothing",
        { $0.attributes["/etc/bgtaskd/apps.d"] = owned(0, 0, 0o1777) },
        .refused("its directory /etc/bgtaskd/apps.d is writable by group and others (mode 1777)")),
    TrustRow(
        "apps.d owned by nobody", { $0.attributes["/etc/bgtaskd/apps.d"] = owned(65534, 65534, 0o755) },
        .refused("its directory /etc/bgtaskd/apps.d is owned by uid 65534, not root")),
    TrustRow(
        "the root 0777", { $0.attributes["/etc/bgtaskd"] = owned(0, 0, 0o777) },
        .refused("its directory /etc/bgtaskd is writable by group and others (mode 0777)")),
    TrustRow(
        "above the root is not checked", { $0.attributes["/etc"] = owned(65534, 0, 0o777) }, .trusted(appFile)),
    TrustRow(
        "a per-user root owned by its user", daemonUserID: 1000, root: "/home/u/.config/bgtaskd",
        path: "/home/u/.config/bgtaskd/apps.d/mail.conf",
        { tree in
            tree.files = ["/home/u/.config/bgtaskd/apps.d/mail.conf": "[Policy]\n"]
            for path in ["/home/u/.config/bgtaskd", "/home/u/.config/bgtaskd/apps.d"] {
                tree.attributes[path] = owned(1000, 1000, 0o700)
            }
            tree.attributes["/home/u/.config/bgtaskd/apps.d/mail.conf"] = owned(1000, 1000, 0o644)
        }, .trusted("/home/u/.config/bgtaskd/apps.d/mail.conf")),

    // What is not a regular file.
    TrustRow(
        "a directory where a file is expected",
        {
            $0.files = [:]; $0.directories = [appFile]
        },
        .refused("a directory, not a regular file")),
    TrustRow(
        "a FIFO",
        {
            $0.files = [:]; $0.specialFiles = [appFile: .fifo]
        }, .refused("a FIFO, not a regular file")),
    TrustRow(
        "a character device",
        {
            $0.files = [:]; $0.specialFiles = [appFile: .characterDevice]
        },
        .refused("a character device, not a regular file")),
    TrustRow(
        "a block device",
        {
            $0.files = [:]; $0.specialFiles = [appFile: .blockDevice]
        },
        .refused("a block device, not a regular file")),
    TrustRow(
        "a socket",
        {
            $0.files = [:]; $0.specialFiles = [appFile: .socket]
        }, .refused("a socket, not a regular file")),
    TrustRow(
        "a file where a directory is expected", path: "/etc/bgtaskd/apps.d", expecting: .directory,
        { $0.files = ["/etc/bgtaskd/apps.d": ""] }, .refused("a regular file, not a directory")),
    TrustRow(
        "a directory as expected", path: "/etc/bgtaskd/apps.d", expecting: .directory, .trusted("/etc/bgtaskd/apps.d")),
    TrustRow("nothing there", path: "/etc/bgtaskd/apps.d/other.conf", .missing),
    TrustRow("no root", root: "/etc/nothing", path: "/etc/nothing/bgtaskd.conf", .missing),
    TrustRow(
        "a directory that cannot be looked up", { $0.uncheckable = ["/etc/bgtaskd/apps.d": "Permission denied"] },
        .refused("its directory /etc/bgtaskd/apps.d cannot be checked (Permission denied)")),
    TrustRow(
        "a file that cannot be looked up", { $0.uncheckable = [appFile: "Input/output error"] },
        .refused("cannot be checked (Input/output error)")),

    // Symbolic links.
    TrustRow(
        "a symlink to a trusted place outside the root",
        {
            withSharedFile(&$0); link(to: "/usr/share/bgtaskd/mail.conf")(&$0)
        },
        .trusted("/usr/share/bgtaskd/mail.conf")),
    TrustRow(
        "a relative symlink inside the root",
        {
            $0.files["/etc/bgtaskd/shared/mail.conf"] = "[Policy]\n"; link(to: "../shared/mail.conf")(&$0)
        },
        .trusted("/etc/bgtaskd/shared/mail.conf")),
    TrustRow(
        "an absolute symlink into the root walks from /, checking what it passes",
        { tree in
            tree.files["/etc/bgtaskd/shared/mail.conf"] = "[Policy]\n"
            tree.attributes["/etc"] = owned(0, 0, 0o777)
            link(to: "/etc/bgtaskd/shared/mail.conf")(&tree)
        },
        .refused(
            "a symlink to /etc/bgtaskd/shared/mail.conf, whose directory /etc is writable by group and others "
                + "(mode 0777)")),
    TrustRow(
        "an absolute symlink into the root through trusted directories",
        { tree in
            tree.files["/etc/bgtaskd/shared/mail.conf"] = "[Policy]\n"
            link(to: "/etc/bgtaskd/shared/mail.conf")(&tree)
        }, .trusted("/etc/bgtaskd/shared/mail.conf")),
    TrustRow(
        "a symlink into /tmp (sticky, writable by others)",
        { tree in
            tree.files["/tmp/x"] = "[Launch]\nExecStart=/tmp/evil\n"
            tree.attributes["/tmp"] = owned(0, 0, 0o1777)
            link(to: "/tmp/x")(&tree)
        }, .refused("a symlink to /tmp/x, whose directory /tmp is writable by group and others (mode 1777)")),
    TrustRow(
        "a symlink into a world-writable directory",
        { tree in
            tree.files["/srv/drop/mail.conf"] = "[Policy]\n"
            tree.attributes["/srv/drop"] = owned(0, 0, 0o757)
            link(to: "/srv/drop/mail.conf")(&tree)
        }, .refused("a symlink to /srv/drop/mail.conf, whose directory /srv/drop is writable by others (mode 0757)")),
    TrustRow(
        "a symlink leaving the root through .. is checked up to /",
        { tree in
            tree.files["/etc/other/mail.conf"] = "[Policy]\n"
            tree.attributes["/etc"] = owned(0, 100, 0o775)
            link(to: "../../other/mail.conf")(&tree)
        }, .refused("a symlink to ../../other/mail.conf, whose directory /etc is writable by group (mode 0775)")),
    TrustRow(
        "a symlink to a file owned by nobody",
        { tree in
            withSharedFile(&tree)
            tree.attributes["/usr/share/bgtaskd/mail.conf"] = owned(65534, 65534, 0o644)
            link(to: "/usr/share/bgtaskd/mail.conf")(&tree)
        }, .refused("a symlink to /usr/share/bgtaskd/mail.conf, which is owned by uid 65534, not root")),
    TrustRow(
        "a symlink to a group-writable file",
        { tree in
            withSharedFile(&tree)
            tree.attributes["/usr/share/bgtaskd/mail.conf"] = owned(0, 100, 0o664)
            link(to: "/usr/share/bgtaskd/mail.conf")(&tree)
        }, .refused("a symlink to /usr/share/bgtaskd/mail.conf, which is writable by group (mode 0664)")),
    TrustRow(
        "a symlink to /dev/null",
        {
            $0.specialFiles["/dev/null"] = .characterDevice; link(to: "/dev/null")(&$0)
        },
        .refused("a symlink to /dev/null, which is a character device, not a regular file")),
    TrustRow(
        "a chain of symlinks to a trusted place",
        { tree in
            withSharedFile(&tree)
            tree.symbolicLinks["/usr/share/bgtaskd/current.conf"] = "mail.conf"
            link(to: "/usr/share/bgtaskd/current.conf")(&tree)
        }, .trusted("/usr/share/bgtaskd/mail.conf")),
    TrustRow(
        "a chain whose second link leads into /tmp",
        { tree in
            tree.files["/tmp/x"] = "[Policy]\n"
            tree.attributes["/tmp"] = owned(0, 0, 0o1777)
            tree.symbolicLinks["/usr/share/bgtaskd/current.conf"] = "/tmp/x"
            link(to: "/usr/share/bgtaskd/current.conf")(&tree)
        },
        .refused(
            "a symlink to /usr/share/bgtaskd/current.conf, whose directory /tmp is writable by group and others "
                + "(mode 1777)")),
    TrustRow(
        "a symlink loop",
        { tree in
            link(to: "loop.conf")(&tree)
            tree.symbolicLinks["/etc/bgtaskd/apps.d/loop.conf"] = "mail.conf"
        }, .refused("a symlink to loop.conf: too many levels of symbolic links (a loop?)")),
    TrustRow(
        "a symlink to itself", link(to: "mail.conf"),
        .refused("a symlink to mail.conf: too many levels of symbolic links (a loop?)")),
    TrustRow("a dangling symlink", link(to: "/usr/share/bgtaskd/gone.conf"), .missing),
    TrustRow("a symlink with an empty target", link(to: ""), .missing),
    TrustRow(
        "a dangling symlink into /tmp: anyone may make its target",
        { tree in
            tree.directories.insert("/tmp")
            tree.attributes["/tmp"] = owned(0, 0, 0o1777)
            link(to: "/tmp/gone.conf")(&tree)
        }, .refused("a symlink to /tmp/gone.conf, whose directory /tmp is writable by group and others (mode 1777)")),
    TrustRow(
        "nothing there, in a directory anyone may write to", path: "/etc/bgtaskd/apps.d/other.conf",
        { $0.attributes["/etc/bgtaskd/apps.d"] = owned(0, 0, 0o777) },
        .refused("its directory /etc/bgtaskd/apps.d is writable by group and others (mode 0777)")),
    TrustRow(
        "a symlink through a file",
        {
            withSharedFile(&$0); link(to: "/usr/share/bgtaskd/mail.conf/x")(&$0)
        },
        .refused(
            "a symlink to /usr/share/bgtaskd/mail.conf/x, whose directory /usr/share/bgtaskd/mail.conf is a regular "
                + "file, not a directory")),
    TrustRow(
        "a trusted link in an untrusted directory",
        { tree in
            withSharedFile(&tree)
            tree.attributes["/etc/bgtaskd/apps.d"] = owned(0, 0, 0o777)
            link(to: "/usr/share/bgtaskd/mail.conf")(&tree)
        }, .refused("its directory /etc/bgtaskd/apps.d is writable by group and others (mode 0777)")),
    TrustRow(
        "apps.d a symlink to a trusted directory",
        { tree in
            tree.files = ["/usr/share/bgtaskd/apps/mail.conf": "[Policy]\n"]
            tree.symbolicLinks["/etc/bgtaskd/apps.d"] = "/usr/share/bgtaskd/apps"
        }, .trusted("/usr/share/bgtaskd/apps/mail.conf")),
    TrustRow(
        "apps.d a symlink into /tmp",
        { tree in
            tree.files = ["/tmp/apps/mail.conf": "[Policy]\n"]
            tree.attributes["/tmp"] = owned(0, 0, 0o1777)
            tree.symbolicLinks["/etc/bgtaskd/apps.d"] = "/tmp/apps"
        }, .refused("a symlink to /tmp/apps, whose directory /tmp is writable by group and others (mode 1777)")),
    TrustRow(
        "the root itself a symlink: followed, not checked above",
        { tree in
            tree.files = ["/srv/bgtaskd/apps.d/mail.conf": "[Policy]\n"]
            tree.attributes["/srv"] = owned(0, 0, 0o777)
            tree.symbolicLinks["/etc/bgtaskd"] = "/srv/bgtaskd"
        }, .trusted("/srv/bgtaskd/apps.d/mail.conf")),
    TrustRow(
        "a relative root, from the working directory", root: "bgtaskd", path: "bgtaskd/apps.d/mail.conf",
        { $0.files = ["/bgtaskd/apps.d/mail.conf": "[Policy]\n"] }, .trusted("/bgtaskd/apps.d/mail.conf")),
    TrustRow(
        "a path outside the root is checked up to /", path: "/srv/other.conf",
        {
            $0.files["/srv/other.conf"] = ""; $0.attributes["/srv"] = owned(0, 0, 0o777)
        },
        .refused("its directory /srv is writable by group and others (mode 0777)")),
]

@Test(arguments: trustRows)
func theTrustRule(_ row: TrustRow) {
    #expect(ExpectedVerdict(row.verdict()) == row.expected)
}

@Test func aTrustedVerdictCarriesTheStatusChecked() throws {
    var tree = InMemoryFileSystem(files: [appFile: ""])
    tree.attributes[appFile] = InMemoryFileSystem.Attributes(ownerID: 0, groupID: 7, mode: 0o640)
    let verdict = ConfigurationTrust(root: "/etc/bgtaskd", daemonUserID: 0).evaluate(appFile) { tree.lookUp($0) }
    guard case .trusted(_, let status) = verdict else {
        Issue.record("\(verdict)")
        return
    }
    #expect(status == FileStatus(kind: .regularFile, ownerID: 0, groupID: 7, mode: 0o640))
}

/// The descriptor's own status, checked after the open: the file read must be the file judged.
@Test(arguments: [
    (FileStatus(kind: .regularFile, ownerID: 0, groupID: 0, mode: 0o644, device: 8, inode: 42), nil),
    (
        FileStatus(kind: .regularFile, ownerID: 0, groupID: 0, mode: 0o644, device: 8, inode: 43),
        TrustRefusal.Problem.replaced
    ),
    (
        FileStatus(kind: .regularFile, ownerID: 0, groupID: 0, mode: 0o644, device: 9, inode: 42),
        TrustRefusal.Problem.replaced
    ),
    (
        FileStatus(kind: .fifo, ownerID: 0, groupID: 0, mode: 0o644, device: 8, inode: 42),
        .kind(.fifo, expected: .regularFile)
    ),
    (FileStatus(kind: .regularFile, ownerID: 0, groupID: 0, mode: 0o666, device: 8, inode: 42), .writable(mode: 0o666)),
    (FileStatus(kind: .regularFile, ownerID: 5, groupID: 0, mode: 0o644, device: 8, inode: 42), .owner(5)),
])
func theOpenedFileIsTheFileChecked(_ opened: FileStatus, _ problem: TrustRefusal.Problem?) {
    let checked = FileStatus(kind: .regularFile, ownerID: 0, groupID: 0, mode: 0o644, device: 8, inode: 42)
    let trust = ConfigurationTrust(root: "/etc/bgtaskd", daemonUserID: 0)
    #expect(trust.problem(opened: opened, checked: checked, expecting: .regularFile) == problem)
}

// MARK: The loader

/// Loads the standard tree with `change` made, for a daemon running as `daemonUserID`.
private func loadTree(daemonUserID: UInt32 = 0, _ change: (inout InMemoryFileSystem) -> Void) -> ConfigurationLoadResult
{
    var tree = InMemoryFileSystem(files: [
        mainPath: "[Limits]\nHistorySize=5\n",
        "\(dropInPath)/10-a.conf": "[Limits]\nTasksPerAppMax=7\n",
        "\(appsPath)/mail.conf": "[Launch]\nExecStart=/usr/bin/mail-sync\n[Access]\nUser=mail\n",
        "\(appsPath)/photos.conf": "[Launch]\nExecStart=/usr/bin/photos\n",
    ])
    change(&tree)
    return ConfigurationLoader(path: mainPath, daemonUserID: daemonUserID, fileSystem: tree).load()
}

@Test func aRefusedAppFileIsRefusedWhole() {
    let result = loadTree { $0.attributes["\(appsPath)/mail.conf"] = .init(ownerID: 0, groupID: 0, mode: 0o666) }
    // Neither its command nor its pin applies; the file beside it does.
    #expect(result.configuration.launch.appCommands == ["photos": ["/usr/bin/photos"]])
    #expect(result.configuration.access.appUsers.isEmpty)
    #expect(result.configuration.core.appPolicies["mail"] == nil)
    #expect(result.filesRead == [mainPath, "\(dropInPath)/10-a.conf", "\(appsPath)/photos.conf"])
    #expect(result.refused.map(\.description) == ["\(appsPath)/mail.conf: writable by group and others (mode 0666)"])
    #expect(result.refused.first?.consequence == "refused; its settings are not used")
    #expect(result.diagnostics.isEmpty)
    #expect(result.hasErrors)
    #expect(result.configuration.core.historySize == 5)
}

@Test func aRefusedDirectoryRefusesEverythingInIt() {
    let result = loadTree { $0.attributes[appsPath] = .init(ownerID: 0, groupID: 0, mode: 0o777) }
    #expect(result.configuration.launch.appCommands.isEmpty)
    #expect(result.configuration.access.appUsers.isEmpty)
    #expect(result.filesRead == [mainPath, "\(dropInPath)/10-a.conf"])
    #expect(result.refused.count == 1)
    #expect(result.refused.first?.path == appsPath)
    #expect(result.refused.first?.isDirectory == true)
    #expect(result.refused.first?.consequence == "refused; none of the files in it are used")
    #expect(result.configuration.core.tasksPerAppMax == 7)
}

@Test func aRefusedMainFileLeavesTheDefaultsAndTheRest() {
    let result = loadTree { $0.attributes[mainPath] = .init(ownerID: 65534, groupID: 65534, mode: 0o644) }
    #expect(result.configuration.core.historySize == DaemonConfiguration().core.historySize)
    #expect(result.configuration.core.tasksPerAppMax == 7)
    #expect(result.refused.map(\.description) == ["\(mainPath): owned by uid 65534, not root"])
}

@Test func aRefusedRootRefusesEveryFile() {
    let result = loadTree { $0.attributes["/etc/bgtaskd"] = .init(ownerID: 0, groupID: 0, mode: 0o777) }
    #expect(result.configuration == DaemonConfiguration())
    #expect(result.filesRead.isEmpty)
    // The main file and both directories, each refused for the root's mode.
    #expect(result.refused.map(\.path) == [mainPath, dropInPath, appsPath])
    #expect(
        result.refused.allSatisfy {
            $0.refusal.description == "its directory /etc/bgtaskd is writable by group and others (mode 0777)"
        })
}

@Test func aPerUserDaemonTrustsItsOwnFilesOnly() {
    let result = loadTree(daemonUserID: 1000) { tree in
        for path in ["/etc/bgtaskd", appsPath, "\(appsPath)/photos.conf"] {
            tree.attributes[path] = .init(ownerID: 1000, groupID: 1000, mode: path.hasSuffix(".conf") ? 0o644 : 0o755)
        }
        tree.attributes["\(appsPath)/mail.conf"] = .init(ownerID: 1001, groupID: 1001, mode: 0o644)
        tree.attributes["\(dropInPath)/10-a.conf"] = .init(ownerID: 1000, groupID: 1000, mode: 0o664)
    }
    #expect(result.filesRead == [mainPath, "\(appsPath)/photos.conf"])
    #expect(
        result.refused.map(\.description) == [
            "\(dropInPath)/10-a.conf: writable by group (mode 0664)",
            "\(appsPath)/mail.conf: owned by uid 1001, not root or uid 1000 (the daemon's user)",
        ])
}

@Test func refusalsAreListedAtTheTopOfTheDump() {
    let result = loadTree { $0.specialFiles["\(appsPath)/pipe.conf"] = .fifo }
    #expect(
        result.sources.renderComments() == """
            # read: \(mainPath)
            # read: \(dropInPath)/10-a.conf
            # read: \(appsPath)/mail.conf
            # read: \(appsPath)/photos.conf
            # refused: \(appsPath)/pipe.conf: a FIFO, not a regular file

            """)
    // Comment lines: the dump with them still reads back to the same configuration.
    let dump = result.sources.renderComments() + result.configuration.renderINI()
    #expect(DaemonConfiguration.parseRenderedINI(dump, fileName: "dump").configuration == result.configuration)
}
