// Fresh scratch directories made with mkdtemp(3), for the tools and tests that stage a daemon, a contained
// manager or a soak in a directory of their own.
import Glibc

/// Fresh, uniquely named directories.
public enum TemporaryDirectory {
    /// Makes `<base>/<prefix>-XXXXXX` with `mkdtemp(3)` and returns its path. The base is `parent`, else a
    /// non-empty `$TMPDIR`, else `/tmp`. `mkdtemp` makes it mode 0700; with `worldTraversable` (the default) it is
    /// opened to 0755, so a process running as another user (a hostile client run as `nobody`, a service run by a
    /// contained manager) can reach a socket or an executable inside it.
    public static func make(prefix: String, in parent: String? = nil, worldTraversable: Bool = true) throws(Errno)
        -> String
    {
        let base = parent ?? ProcessEnvironment.current()["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array("\(base)/\(prefix)-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else {
            throw Errno(rawValue: errno, operation: "mkdtemp(\(base)/\(prefix)-XXXXXX)")
        }
        let path = String(cString: made)
        if worldTraversable, chmod(path, 0o755) != 0 {
            let error = Errno(rawValue: errno, operation: "chmod(\(path), 0755)")
            rmdir(path)
            throw error
        }
        return path
    }
}
