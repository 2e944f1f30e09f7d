// libFuzzer target: the configuration trust rule (`ConfigurationTrust.evaluate`) on hostile trees of stat records:
// any owners, modes and kinds, symbolic links anywhere (loops, `..`, absolute and relative, dangling, through files),
// lookups that fail, and any path and root; then the loader over the same tree.
//
// The input is text, one record a line, words separated by spaces:
//   root PATH | uid N | path PATH | directory (ask about a directory)
//   dir PATH UID GID MODE | file PATH UID GID MODE | fifo|chr|blk|sock PATH UID GID MODE
//   link PATH TARGET | fail PATH
// (MODE in octal; unknown lines are ignored.) Directories not listed exist, root's and 0755, above anything listed.
//
// Asserted besides not crashing: the walk ends within a bound of lookups set by the input's size; a trusted path is
// canonical (no link at any prefix) and it (and a file's parent) pass the owner, mode and kind rules, so making
// either writable by others turns the verdict into a refusal; a refusal for an owner, a mode or a kind names a culprit
// that has that problem in the tree, and prints on one line; what root's daemon trusts, every daemon trusts; a tree
// where every entry is root's and safe is never refused for an owner or a mode; and the loader reads exactly the
// files the rule trusts and refuses, with the rule's own reasons, the ones it refuses.
import BGTaskConfig

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzConfigurationTrust(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: start, count: count), as: UTF8.self)
    var scenario = Scenario()
    for line in text.split(separator: "\n") { scenario.read(line) }
    scenario.check()
    return 0
}

/// A tree, a root, a daemon uid and a path to ask about, as the input describes them.
struct Scenario {
    var tree = InMemoryFileSystem()
    var root = "/etc/bgtaskd"
    var daemonUserID: UInt32 = 0
    var path = "/etc/bgtaskd/apps.d/mail.conf"
    var expecting = FileKind.regularFile
    /// The most names in any path or target of the input: with the link limit, it bounds the walk.
    var longestNameCount = 1

    mutating func read(_ line: Substring) {
        let words = line.split(separator: " ").map(String.init)
        guard let keyword = words.first else { return }
        for word in words.dropFirst() { longestNameCount = max(longestNameCount, word.split(separator: "/").count + 1) }
        func attributes(_ offset: Int) -> InMemoryFileSystem.Attributes? {
            guard words.count > offset + 2, let uid = UInt32(words[offset]), let gid = UInt32(words[offset + 1]),
                let mode = UInt32(words[offset + 2], radix: 8)
            else { return nil }
            return InMemoryFileSystem.Attributes(ownerID: uid, groupID: gid, mode: mode & 0o7777)
        }
        switch (keyword, words.count) {
        case ("root", 2): root = words[1]
        case ("uid", 2): daemonUserID = UInt32(words[1]) ?? daemonUserID
        case ("path", 2): path = words[1]
        case ("directory", 1): expecting = .directory
        case ("link", 3): tree.symbolicLinks[words[1]] = words[2]
        case ("fail", 2): tree.uncheckable[words[1]] = "Permission denied"
        case ("dir", 5), ("file", 5), ("fifo", 5), ("chr", 5), ("blk", 5), ("sock", 5):
            let path = words[1]
            switch keyword {
            case "dir": tree.directories.insert(path)
            case "file": tree.files[path] = "[Policy]\nBackgroundTimeSec=1min\n"
            case "fifo": tree.specialFiles[path] = .fifo
            case "chr": tree.specialFiles[path] = .characterDevice
            case "blk": tree.specialFiles[path] = .blockDevice
            default: tree.specialFiles[path] = .socket
            }
            if let owned = attributes(2) { tree.attributes[path] = owned }
        default: break
        }
    }

    /// The verdict on `path` in `tree` for a daemon running as `uid`, and the lookups it took.
    func evaluate(
        _ tree: InMemoryFileSystem, uid: UInt32, path: String? = nil, expecting: FileKind? = nil
    ) -> (TrustVerdict, Int) {
        var lookups = 0
        let trust = ConfigurationTrust(root: root, daemonUserID: uid)
        let verdict = trust.evaluate(path ?? self.path, expecting: expecting ?? self.expecting) {
            lookups += 1
            return tree.lookUp($0)
        }
        return (verdict, lookups)
    }

    func check() {
        let (verdict, lookups) = evaluate(tree, uid: daemonUserID)
        // Two walks (the root's and the path's), each at most its names plus 40 links' worth of names, each name
        // looked up once, and the directories from / checked at each arrival other than by going down (a start, a
        // link to an absolute path, a `..`), each at most as deep as the names walked.
        let walk = (longestNameCount + 2) * (ConfigurationTrust.maximumSymbolicLinks + 2) * 2
        precondition(lookups <= walk * (walk + 2), "\(lookups) lookups for \(walk) names")
        let trust = ConfigurationTrust(root: root, daemonUserID: daemonUserID)
        switch verdict {
        case .missing:
            break
        case .trusted(let resolved, let status):
            checkTrusted(resolved, status, trust)
        case .refused(let refusal):
            checkRefused(refusal, trust)
        }
        // Root's daemon trusts only root's files: whatever it trusts, a daemon of any user trusts too.
        if case .trusted(let rootsPath, _) = evaluate(tree, uid: 0).0 {
            guard case .trusted(let path, _) = verdict else { preconditionFailure("trusted for root only: \(verdict)") }
            precondition(path == rootsPath, "resolved differently by uid")
        }
        // A tree where everything is root's and safe fails only for kinds, loops and failed lookups.
        var safe = tree
        safe.attributes = [:]
        if case .refused(let refusal) = evaluate(safe, uid: daemonUserID).0 {
            switch refusal.problem {
            case .owner, .writable: preconditionFailure("refused a safe tree: \(refusal)")
            case .kind, .tooManySymbolicLinks, .uncheckable, .replaced: break
            }
        }
        checkLoader()
    }

    /// A trusted path is canonical, passes the rules with its parent, and stops being trusted when either opens up.
    func checkTrusted(_ resolved: String, _ status: FileStatus, _ trust: ConfigurationTrust) {
        precondition(resolved.hasPrefix("/"), "relative \(resolved)")
        let names = resolved.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        precondition(resolved == "/" || !names.contains { $0.isEmpty || $0 == "." || $0 == ".." }, "\(resolved)")
        var prefix = ""
        for name in names where !name.isEmpty {
            prefix += "/" + name
            guard case .found(let entry) = tree.lookUp(prefix) else { preconditionFailure("\(prefix) is not there") }
            precondition(entry.status.kind != .symbolicLink, "a link in trusted \(resolved)")
        }
        guard case .found(let entry) = tree.lookUp(resolved) else { preconditionFailure("\(resolved) is not there") }
        precondition(entry.status == status, "the status returned is not the one looked up")
        precondition(trust.problem(with: status, expecting: expecting) == nil, "trusted \(resolved) fails the rules")
        var opened = tree
        opened.attributes[resolved] = .init(ownerID: status.ownerID, groupID: status.groupID, mode: status.mode | 0o002)
        guard case .refused = evaluate(opened, uid: daemonUserID).0 else {
            preconditionFailure("\(resolved) made writable by others is still trusted")
        }
        // A directory may be the root itself, whose parent is not checked; a file's parent always is.
        guard expecting == .regularFile else { return }
        let parent = String(resolved[..<(resolved.lastIndex(of: "/") ?? resolved.startIndex)])
        let parentPath = parent.isEmpty ? "/" : parent
        guard case .found(let parentEntry) = tree.lookUp(parentPath) else { preconditionFailure("no \(parentPath)") }
        precondition(trust.problem(with: parentEntry.status, expecting: .directory) == nil, "\(parentPath) fails")
        var openedParent = tree
        openedParent.attributes[parentPath] = .init(
            ownerID: parentEntry.status.ownerID, groupID: parentEntry.status.groupID, mode: 0o777)
        guard case .refused = evaluate(openedParent, uid: daemonUserID).0 else {
            preconditionFailure("\(resolved) in a directory writable by others is still trusted")
        }
    }

    /// A refusal names a culprit that really has the problem, in one line.
    func checkRefused(_ refusal: TrustRefusal, _ trust: ConfigurationTrust) {
        let description = refusal.description
        precondition(
            !description.isEmpty && !description.contains("\n"), "bad description \(description.debugDescription)")
        switch refusal.problem {
        case .owner, .writable, .kind:
            guard case .found(let entry) = tree.lookUp(refusal.culprit) else {
                preconditionFailure("the culprit \(refusal.culprit) is not there: \(description)")
            }
            let kind = refusal.isSubject ? expecting : .directory
            let problem = trust.problem(with: entry.status, expecting: kind)
            precondition(
                problem == refusal.problem, "\(refusal.culprit) has \(String(describing: problem)): \(description)")
        case .tooManySymbolicLinks:
            guard case .found(let entry) = tree.lookUp(refusal.culprit) else { preconditionFailure("no link there") }
            precondition(entry.status.kind == .symbolicLink, "a loop at a non-link: \(description)")
        case .uncheckable, .replaced:
            break
        }
    }

    /// The loader over the tree reads what the rule trusts and refuses what it refuses, for the same reasons.
    func checkLoader() {
        let mainPath = root.hasSuffix("/") ? root + "bgtaskd.conf" : root + "/bgtaskd.conf"
        let result = ConfigurationLoader(path: mainPath, root: root, daemonUserID: daemonUserID, fileSystem: tree)
            .load()
        for file in result.filesRead {
            guard case .trusted = evaluate(tree, uid: daemonUserID, path: file, expecting: .regularFile).0 else {
                preconditionFailure("the loader read \(file), which the rule does not trust")
            }
        }
        for refused in result.refused {
            let verdict = ConfigurationTrust(root: root, daemonUserID: daemonUserID).evaluate(
                refused.path, expecting: refused.isDirectory ? .directory : .regularFile
            ) { tree.lookUp($0) }
            guard case .refused(let reason) = verdict else {
                preconditionFailure("the loader refused \(refused.path), which the rule does not: \(verdict)")
            }
            precondition(reason == refused.refusal, "the loader's reason differs: \(refused) vs \(reason)")
        }
        precondition(
            result.hasErrors == (!result.refused.isEmpty || result.diagnostics.contains { $0.severity == .error }))
    }
}
