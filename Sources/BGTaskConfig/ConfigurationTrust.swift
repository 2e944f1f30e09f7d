// The rule deciding whether a configuration file could only have been written by its owner: a pure function of
// what lstat says along its path, kept apart from the system calls so it can be table-tested and fuzzed.

/// What kind of file a path names, as `st_mode & S_IFMT` says.
public enum FileKind: Hashable, Sendable, CustomStringConvertible {
    /// `S_IFREG`.
    case regularFile
    /// `S_IFDIR`.
    case directory
    /// `S_IFLNK`, as `lstat` reports a symbolic link itself.
    case symbolicLink
    /// `S_IFIFO`: a named pipe.
    case fifo
    /// `S_IFCHR`.
    case characterDevice
    /// `S_IFBLK`.
    case blockDevice
    /// `S_IFSOCK`.
    case socket
    /// A type the kernel reported that none of the above is.
    case unknown

    /// With its article, for a message: "a regular file", "a FIFO".
    public var description: String {
        switch self {
        case .regularFile: "a regular file"
        case .directory: "a directory"
        case .symbolicLink: "a symbolic link"
        case .fifo: "a FIFO"
        case .characterDevice: "a character device"
        case .blockDevice: "a block device"
        case .socket: "a socket"
        case .unknown: "a file of unknown type"
        }
    }
}

/// What `stat` says about a file, as far as trusting it goes.
public struct FileStatus: Hashable, Sendable {
    /// The file's type.
    public var kind: FileKind
    /// `st_uid`.
    public var ownerID: UInt32
    /// `st_gid`.
    public var groupID: UInt32
    /// The permission bits with set-user-id, set-group-id and sticky (`st_mode & 07777`).
    public var mode: UInt32
    /// `st_dev`: with `inode`, which file this is, so the file opened can be matched with the file checked.
    public var device: UInt64
    /// `st_ino`.
    public var inode: UInt64

    /// Creates a status.
    public init(kind: FileKind, ownerID: UInt32, groupID: UInt32, mode: UInt32, device: UInt64 = 0, inode: UInt64 = 0) {
        self.kind = kind
        self.ownerID = ownerID
        self.groupID = groupID
        self.mode = mode
        self.device = device
        self.inode = inode
    }
}

/// One name in the file system as `lstat` sees it: a symbolic link is not followed, and carries its target.
public struct PathEntry: Hashable, Sendable {
    /// The name's own status (the link's, for a symbolic link).
    public var status: FileStatus
    /// For a symbolic link, its target as `readlink` returns it; nil otherwise.
    public var linkTarget: String?

    /// Creates an entry.
    public init(status: FileStatus, linkTarget: String? = nil) {
        self.status = status
        self.linkTarget = linkTarget
    }
}

/// What looking a path up found.
public enum PathLookup: Hashable, Sendable {
    /// Something is there.
    case found(PathEntry)
    /// Nothing is (`ENOENT`, or `ENOTDIR` for a path through a file).
    case missing
    /// The lookup failed otherwise (`EACCES`, `EIO`): the path cannot be checked, so it is not trusted.
    case failed(String)
}

/// Why a configuration file or directory is not trusted.
public struct TrustRefusal: Hashable, Sendable, CustomStringConvertible {
    /// The rule that fails.
    public enum Problem: Hashable, Sendable {
        /// Owned by this uid, which is neither root nor the daemon's own user.
        case owner(UInt32)
        /// Writable by group or others; the mode (`st_mode & 07777`) says which.
        case writable(mode: UInt32)
        /// Of this kind where the other was needed (a FIFO where a regular file belongs).
        case kind(FileKind, expected: FileKind)
        /// More symbolic links than the kernel follows (`MAXSYMLINKS`, 40) on the way: a loop, most likely.
        case tooManySymbolicLinks
        /// Could not be looked up (the system's message): what cannot be checked is not trusted.
        case uncheckable(String)
        /// The file opened is not the one checked (another file took its name in between).
        case replaced
    }

    /// The rule that fails.
    public var problem: Problem
    /// What fails it: the file or directory asked about, or a directory on its way, as a path with no symbolic link
    /// in it.
    public var culprit: String
    /// Whether the culprit is what was asked about (its own owner, mode or kind) rather than a directory on its way.
    public var isSubject: Bool
    /// The first symbolic link followed on the way, and its target, when the culprit lies past it.
    public var link: FollowedLink?
    /// The daemon's user: besides root, the one owner trusted.
    public var daemonUserID: UInt32

    /// A symbolic link followed on the way to a file.
    public struct FollowedLink: Hashable, Sendable {
        /// Where the link is.
        public var path: String
        /// What it points to, as written in it.
        public var target: String

        /// Creates a followed link.
        public init(path: String, target: String) {
            self.path = path
            self.target = target
        }
    }

    /// Creates a refusal.
    public init(problem: Problem, culprit: String, isSubject: Bool, link: FollowedLink? = nil, daemonUserID: UInt32) {
        self.problem = problem
        self.culprit = culprit
        self.isSubject = isSubject
        self.link = link
        self.daemonUserID = daemonUserID
    }

    /// The rule that fails, in words: "writable by group (mode 0664)", "its directory /etc/bgtaskd/apps.d is
    /// writable by others (mode 0777)", "a symlink to /tmp/x, whose directory /tmp is writable by others (mode 1777)".
    public var description: String {
        if problem == .tooManySymbolicLinks {
            return (link.map { "a symlink to \($0.target): " } ?? "") + "too many levels of symbolic links (a loop?)"
        }
        let (phrase, takesIs) = Self.phrase(problem, daemonUserID: daemonUserID)
        let predicate = takesIs ? "is " + phrase : phrase
        switch (link, isSubject) {
        case (nil, true): return phrase
        case (nil, false): return "its directory \(culprit) \(predicate)"
        case (let link?, true): return "a symlink to \(link.target), which \(predicate)"
        case (let link?, false): return "a symlink to \(link.target), whose directory \(culprit) \(predicate)"
        }
    }

    /// The problem in words, and whether it reads after "is" ("writable by group") or stands as a predicate of its
    /// own ("cannot be checked").
    private static func phrase(_ problem: Problem, daemonUserID: UInt32) -> (String, takesIs: Bool) {
        switch problem {
        case .owner(let uid):
            let owners = daemonUserID == 0 ? "root" : "root or uid \(daemonUserID) (the daemon's user)"
            return ("owned by uid \(uid), not \(owners)", true)
        case .writable(let mode):
            let groupWritable = mode & 0o020 != 0
            let othersWritable = mode & 0o002 != 0
            let who = groupWritable && othersWritable ? "group and others" : groupWritable ? "group" : "others"
            return ("writable by \(who) (mode \(octal(mode)))", true)
        case .kind(let kind, let expected):
            return ("\(kind), not \(expected)", true)
        case .tooManySymbolicLinks:
            return ("too many levels of symbolic links (a loop?)", false)
        case .uncheckable(let message):
            return ("cannot be checked (\(message))", false)
        case .replaced:
            return ("was replaced while it was being checked", false)
        }
    }

    /// `mode` as four octal digits, as `stat -c %a` pads it: 0644, 1777.
    static func octal(_ mode: UInt32) -> String {
        let digits = String(mode & 0o7777, radix: 8)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }
}

/// What the rule decided about one path.
public enum TrustVerdict: Hashable, Sendable {
    /// Trusted: `path` is where the file really is (no symbolic link in it), and `status` what was checked there.
    case trusted(path: String, status: FileStatus)
    /// Nothing is there, and the way to where it would be is trusted (a link dangling into a trusted place
    /// included): nothing to use, nothing to refuse. Nothing in an untrusted directory is refused instead: anyone who
    /// may write there could put something there.
    case missing
    /// Not trusted, and why.
    case refused(TrustRefusal)
}

/// The trust rule for configuration, as cron, sudo and sshd's `StrictModes` apply it: a file is used only when
/// nobody but its owner could have written it, and its owner is root or the daemon's own user.
///
/// A path is **trusted** when, resolving it as the kernel does (symbolic links followed, at most 40), the file it
/// leads to is of the kind wanted (a regular file, or a directory for `bgtaskd.conf.d` and `apps.d`), and it and
/// every directory that must be checked are
/// - owned by root or by `daemonUserID` (the daemon's effective uid: a per-user daemon's own files are its to
///   trust), and
/// - not writable by group or others (`mode & 022` clear; the sticky bit does not excuse a directory: anyone may
///   still put the file the daemon looks for in it before root does).
///
/// The directories that must be checked: for each directory the resolution enters, the directory itself and each
/// one above it, up to the configuration root when it lies inside the root, up to `/` when it lies outside (which
/// only a symbolic link leads to). So a file inside the root is checked up to the root, whose own path the operator
/// chose (`/etc/bgtaskd`, `--config`) and which is not checked above; a symbolic link is followed only to a place
/// trusted all the way up to `/`, and the directory holding the link is checked as any other on the way. A link's
/// own owner and mode do not matter: nobody can change a link's target, only replace the link, which needs write
/// access to its directory, which is checked.
///
/// Each directory is checked as the resolution enters it, so it stops at the first that fails, before following
/// anything in it: nothing an untrusted user made is ever followed, and a missing file in an untrusted directory is
/// refused rather than missing.
///
/// Everything is decided from `lookup`'s answers (`lstat` and `readlink`, or an in-memory tree): the rule itself
/// does no I/O. The caller then opens the trusted path without following links (`O_NOFOLLOW`) and checks the
/// descriptor's own status with `problem(opened:checked:expecting:)`, so no file can be swapped in between: every
/// directory leading to it is writable only by root or the daemon's user.
public struct ConfigurationTrust: Hashable, Sendable {
    /// The configuration root: the directory holding the main file (`/etc/bgtaskd`, `$XDG_CONFIG_HOME/bgtaskd`, or
    /// the directory of `--config PATH`). Relative paths are taken from `workingDirectory`.
    public var root: String
    /// The daemon's effective uid: the one owner trusted besides root.
    public var daemonUserID: UInt32
    /// What a relative `root` or path is relative to (the daemon's working directory).
    public var workingDirectory: String

    /// The most symbolic links one resolution follows: Linux's `MAXSYMLINKS`, past which `open` fails with `ELOOP`.
    public static let maximumSymbolicLinks = 40

    /// The rule for configuration under `root`, read by a daemon running as `daemonUserID`.
    public init(root: String, daemonUserID: UInt32, workingDirectory: String = "/") {
        self.root = root
        self.daemonUserID = daemonUserID
        self.workingDirectory = workingDirectory
    }

    /// Whether `status` passes the owner and mode rules as a `kind`; the problem if not. The kind is checked first:
    /// a FIFO is refused as a FIFO, whoever owns it.
    public func problem(with status: FileStatus, expecting kind: FileKind) -> TrustRefusal.Problem? {
        if status.kind != kind { return .kind(status.kind, expected: kind) }
        if status.ownerID != 0 && status.ownerID != daemonUserID { return .owner(status.ownerID) }
        if status.mode & 0o022 != 0 { return .writable(mode: status.mode & 0o7777) }
        return nil
    }

    /// Checks what was opened (`fstat` of the descriptor) against the rules and against the file `checked` when the
    /// path was judged: the same device and inode, so the file read is the file trusted.
    public func problem(opened: FileStatus, checked: FileStatus, expecting kind: FileKind) -> TrustRefusal.Problem? {
        if let problem = problem(with: opened, expecting: kind) { return problem }
        if opened.device != checked.device || opened.inode != checked.inode { return .replaced }
        return nil
    }

    /// Judges `path` (a file, or a directory with `expecting: .directory`), looking names up with `lookup`.
    public func evaluate(
        _ path: String, expecting kind: FileKind = .regularFile, lookup: (String) -> PathLookup
    ) -> TrustVerdict {
        // The root as the operator named it: followed wherever it leads, not checked above itself.
        let lexicalRoot = Self.components(of: root, in: workingDirectory)
        var rootWalk = Resolution(checksDirectories: false, root: [], trust: self)
        let rootComponents: [String]
        switch rootWalk.resolve(from: [], lexicalRoot, lookup: lookup) {
        case .found(let components, let entry):
            guard entry.status.kind == .directory else {
                return .refused(
                    refusal(.kind(entry.status.kind, expected: .directory), Self.path(components), isSubject: false))
            }
            rootComponents = components
        case .missing:
            return .missing
        case .refused(let problem, let culprit, _):
            return .refused(refusal(problem, Self.path(culprit), isSubject: false))
        }
        // A path inside the root is resolved from the root's real place, any other from `/`; every directory the walk
        // enters is checked as it enters it.
        let absolute = Self.components(of: path, in: workingDirectory)
        let isBelowRoot = absolute.count > lexicalRoot.count && Array(absolute.prefix(lexicalRoot.count)) == lexicalRoot
        var walk = Resolution(checksDirectories: true, root: rootComponents, trust: self)
        switch walk.resolve(
            from: isBelowRoot ? rootComponents : [],
            isBelowRoot ? Array(absolute.dropFirst(lexicalRoot.count)) : absolute,
            lookup: lookup)
        {
        case .found(let components, let entry):
            let resolved = Self.path(components)
            if let problem = problem(with: entry.status, expecting: kind) {
                return .refused(refusal(problem, resolved, isSubject: true, link: walk.firstLink))
            }
            return .trusted(path: resolved, status: entry.status)
        case .missing:
            return .missing
        case .refused(let problem, let culprit, let isSubject):
            return .refused(refusal(problem, Self.path(culprit), isSubject: isSubject, link: walk.firstLink))
        }
    }

    private func refusal(
        _ problem: TrustRefusal.Problem, _ culprit: String, isSubject: Bool, link: TrustRefusal.FollowedLink? = nil
    ) -> TrustRefusal {
        TrustRefusal(problem: problem, culprit: culprit, isSubject: isSubject, link: link, daemonUserID: daemonUserID)
    }

    /// The components of `path`, made absolute from `directory` when relative, without empty ones and `.` (`..` is
    /// kept, for the resolution to apply as the kernel does, after the symbolic links before it).
    static func components(of path: String, in directory: String) -> [String] {
        let absolute = path.hasPrefix("/") ? path : directory + "/" + path
        return absolute.split(separator: "/").filter { $0 != "." }.map(String.init)
    }

    /// `/a/b` for `["a", "b"]`, `/` for none.
    static func path(_ components: [String]) -> String {
        "/" + components.joined(separator: "/")
    }
}

/// One resolution of a path, name by name, as the kernel's path walk does it, checking each directory it enters (when
/// `checksDirectories`) and recording the first symbolic link it follows.
///
/// A directory is checked as the walk enters it, with the directories above it that must be checked: those up to the
/// root are already (the walk came down through them), except when it climbs out of the root with `..` or starts
/// again at `/` for an absolute link target, where the ones up to `/` are checked then. So the walk stops at the first
/// directory that fails, before following anything found in it, and does work in proportion to the names it walks.
struct Resolution {
    /// What it found.
    enum Outcome {
        /// The path leads here (no symbolic link in the components) to this entry, not yet judged itself.
        case found([String], PathEntry)
        /// Nothing is there, and everything on the way to where it would be passed.
        case missing
        /// The walk could not go on at `culprit`; `isSubject` when that is the last name of the path.
        case refused(TrustRefusal.Problem, culprit: [String], isSubject: Bool)
    }

    /// Whether directories are checked (not for the root's own path, which is taken as given).
    let checksDirectories: Bool
    /// The configuration root, resolved: directories below it are checked up to it, others up to `/`.
    let root: [String]
    let trust: ConfigurationTrust
    /// The first symbolic link followed.
    private(set) var firstLink: TrustRefusal.FollowedLink?
    private var linksFollowed = 0
    /// Directories outside the root checked with everything above them, besides those the walk came down through.
    private var checkedFromSlash: Set<[String]> = []

    init(checksDirectories: Bool, root: [String], trust: ConfigurationTrust) {
        self.checksDirectories = checksDirectories
        self.root = root
        self.trust = trust
    }

    /// Walks `names` from the directory `start` (components with no symbolic link in them): the root, or `/`.
    mutating func resolve(from start: [String], _ names: [String], lookup: (String) -> PathLookup) -> Outcome {
        var current = start
        if let refusal = checkOnArrival(at: current, lookup: lookup) { return refusal }
        // The names still to walk, the next one last.
        var pending = Array(names.reversed())
        // The entry of `current` when the walk went into it by name (not by `..` or a link's `/`).
        var currentEntry: PathEntry?
        while let name = pending.popLast() {
            if name == "." { continue }
            if name == ".." {
                // `..` of `/` is `/`, as in the kernel.
                if !current.isEmpty { current.removeLast() }
                currentEntry = nil
                if let refusal = checkOnArrival(at: current, lookup: lookup) { return refusal }
                continue
            }
            let candidate = current + [name]
            let isFinal = pending.isEmpty
            let entry: PathEntry
            switch lookup(ConfigurationTrust.path(candidate)) {
            case .found(let found): entry = found
            case .missing: return .missing
            case .failed(let message): return .refused(.uncheckable(message), culprit: candidate, isSubject: isFinal)
            }
            if entry.status.kind == .symbolicLink {
                linksFollowed += 1
                guard linksFollowed <= ConfigurationTrust.maximumSymbolicLinks else {
                    return .refused(.tooManySymbolicLinks, culprit: candidate, isSubject: isFinal)
                }
                // An empty target names nothing (`ENOENT`, as the kernel has it).
                guard let target = entry.linkTarget, !target.isEmpty else { return .missing }
                if firstLink == nil {
                    firstLink = TrustRefusal.FollowedLink(path: ConfigurationTrust.path(candidate), target: target)
                }
                if target.hasPrefix("/") {
                    current = []
                    currentEntry = nil
                    if let refusal = checkOnArrival(at: current, lookup: lookup) { return refusal }
                }
                pending += target.split(separator: "/").reversed().map(String.init)
                continue
            }
            if isFinal { return .found(candidate, entry) }
            // Anything left to walk, `.` included, needs a directory here (`ENOTDIR`, as for `file/.`).
            guard entry.status.kind == .directory else {
                return .refused(.kind(entry.status.kind, expected: .directory), culprit: candidate, isSubject: false)
            }
            // Going down: everything above is checked already.
            if checksDirectories, let problem = trust.problem(with: entry.status, expecting: .directory) {
                return .refused(problem, culprit: candidate, isSubject: false)
            }
            current = candidate
            currentEntry = entry
        }
        // The walk ended on a directory (`.` or `..` last, or nothing to walk): that directory is what it found.
        if let currentEntry { return .found(current, currentEntry) }
        switch lookup(ConfigurationTrust.path(current)) {
        case .found(let entry): return .found(current, entry)
        case .missing: return .missing
        case .failed(let message): return .refused(.uncheckable(message), culprit: current, isSubject: true)
        }
    }

    /// Checks `directory`, reached other than by going down into it: the walk's start, `..`, or `/` for an absolute
    /// link. At the root, the root itself; inside it, nothing (the walk came down through it); outside it, each
    /// directory from `/` to it not checked yet.
    private mutating func checkOnArrival(at directory: [String], lookup: (String) -> PathLookup) -> Outcome? {
        guard checksDirectories else { return nil }
        let isInside = directory.count >= root.count && Array(directory.prefix(root.count)) == root
        if isInside && directory.count > root.count { return nil }
        for length in (isInside ? root.count : 0)...directory.count {
            let above = Array(directory.prefix(length))
            guard checkedFromSlash.insert(above).inserted else { continue }
            let problem: TrustRefusal.Problem?
            switch lookup(ConfigurationTrust.path(above)) {
            case .found(let entry): problem = trust.problem(with: entry.status, expecting: .directory)
            case .missing: problem = .replaced
            case .failed(let message): problem = .uncheckable(message)
            }
            if let problem { return .refused(problem, culprit: above, isSubject: false) }
        }
        return nil
    }
}
