// The daemon's configuration as the soak writes it: the way an administrator would, so that the daemon trusts it
// (docs/SERVICE.md: owned by root or the daemon's own user, not writable by group or other, no symlink on the way).

import BGTaskPOSIX
import Glibc

/// Writing the configuration file and checking it is one the daemon would trust.
enum ConfigurationFile {
    /// Writes `text` to `path` whole, as the daemon must find it: a temporary file in the same directory, made 0644
    /// whatever the umask, synced and renamed over `path` (a daemon reading at that moment reads the old file or the
    /// new one, never half of one); then checks `path` and every directory from it up to `root` (the daemon's
    /// configuration root: the directory of `--config PATH`, or `$XDG_CONFIG_HOME/bgtaskd`) and throws naming the
    /// first one the daemon would refuse, rather than run the soak on a configuration it would not read.
    static func write(_ text: String, to path: String, root: String) throws {
        let temporary = path + ".soak-new"
        unlink(temporary)
        do {
            let file = try FileDescriptor.open(
                temporary, .writeOnly, options: [.create, .exclusiveCreate, .noFollow], permissions: 0o644)
            defer { try? file.close() }
            _ = try systemCall("fchmod(\(temporary))") { fchmod(file.rawValue, 0o644) }
            try file.writeAll(Array(text.utf8))
            _ = try systemCall("fsync(\(temporary))") { fsync(file.rawValue) }
            _ = try systemCall("rename(\(temporary), \(path))") { rename(temporary, path) }
        } catch {
            unlink(temporary)
            throw SoakError("cannot write the configuration \(path): \(error)")
        }
        if let problem = trustProblem(path: path, root: root) {
            throw SoakError("the configuration the soak wrote would be refused by the daemon: \(problem)")
        }
    }

    /// Why the daemon would refuse `path`, or nil: `path` and each directory above it up to and including `root`
    /// must be no symlink, owned by root or by this process's user (the daemon's, under a per-user manager), and
    /// not writable by group or other; `path` must be a regular file and lie under `root`.
    static func trustProblem(path: String, root: String) -> String? {
        guard path.hasPrefix(root + "/") else { return "\(path) is not under the configuration root \(root)" }
        var current = path
        var isFile = true
        while true {
            var info = stat()
            guard lstat(current, &info) == 0 else {
                return "\(current) cannot be read: \(Errno(rawValue: errno, operation: "lstat"))"
            }
            let type = info.st_mode & S_IFMT
            if type == S_IFLNK { return "\(current) is a symlink" }
            if isFile && type != S_IFREG { return "\(current) is not a regular file" }
            if !isFile && type != S_IFDIR { return "\(current) is not a directory" }
            if info.st_uid != 0 && info.st_uid != geteuid() {
                return "\(current) is owned by uid \(info.st_uid), not root"
            }
            let mode = info.st_mode & 0o7777
            if mode & 0o022 != 0 {
                return "\(current) is writable by group or other (mode \(String(mode, radix: 8)))"
            }
            if current == root { return nil }
            current = SoakRunPaths.parent(of: current)
            isFile = false
            if current.count < root.count { return "\(path) is not under the configuration root \(root)" }
        }
    }

    /// Makes `path` a directory of mode 0755 (whatever the umask), as `/etc/bgtaskd` is: made if missing, its mode
    /// set if it exists.
    static func makeDirectory(_ path: String) throws {
        if mkdir(path, 0o755) != 0 && errno != EEXIST {
            throw SoakError("cannot make \(path): \(Errno(rawValue: errno, operation: "mkdir"))")
        }
        guard chmod(path, 0o755) == 0 else {
            throw SoakError("cannot set the mode of \(path): \(Errno(rawValue: errno, operation: "chmod"))")
        }
    }
}
