// Looks up users and groups (through NSS) for the ControllerGroup authorization check.
import Glibc

/// The user and group database (`/etc/passwd`, `/etc/group`, or whatever NSS is configured to use).
public enum UserDatabase {
    /// The id of the group called `name` (`getgrnam_r`); nil if there is no such group.
    public static func groupID(named name: String) throws(Errno) -> gid_t? {
        var group = Glibc.group()
        return try lookUp("getgrnam_r(\(name))") { buffer, length, found in
            var result: UnsafeMutablePointer<Glibc.group>?
            let code = getgrnam_r(name, &group, buffer, length, &result)
            found = result != nil
            return code
        } ? group.gr_gid : nil
    }

    /// The id of the user called `name` (`getpwnam_r`); nil if there is no such user.
    public static func userID(named name: String) throws(Errno) -> uid_t? {
        var entry = passwd()
        return try lookUp("getpwnam_r(\(name))") { buffer, length, found in
            var result: UnsafeMutablePointer<passwd>?
            let code = getpwnam_r(name, &entry, buffer, length, &result)
            found = result != nil
            return code
        } ? entry.pw_uid : nil
    }

    /// The login name of `uid` (`getpwuid_r`); nil if the uid has no entry.
    public static func userName(for uid: uid_t) throws(Errno) -> String? {
        try passwordEntry(for: uid)?.name
    }

    /// Whether `uid` belongs to group `gid`, as its primary group or a supplementary one (`getpwuid_r`,
    /// then `getgrouplist`). A uid with no user entry belongs to no group.
    public static func isMember(uid: uid_t, ofGroup gid: gid_t) throws(Errno) -> Bool {
        guard let entry = try passwordEntry(for: uid) else { return false }
        if entry.primaryGroupID == gid { return true }
        var count: Int32 = 32
        while true {
            var groups = [gid_t](repeating: 0, count: Int(count))
            let previousCount = count
            // getgrouplist returns -1 and the needed count when the array is too small; it sets no errno.
            if getgrouplist(entry.name, entry.primaryGroupID, &groups, &count) >= 0 {
                return groups.prefix(Int(count)).contains(gid)
            }
            guard count > previousCount else {
                throw Errno(rawValue: ERANGE, operation: "getgrouplist(\(entry.name))")
            }
        }
    }

    /// The name, primary group and home directory of `uid` (`getpwuid_r`); nil if the uid has no entry.
    package static func account(for uid: uid_t) throws(Errno) -> (name: String, gid: gid_t, home: String)? {
        var entry = passwd()
        var account: (name: String, gid: gid_t, home: String)?
        _ = try lookUp("getpwuid_r(\(uid))") { buffer, length, found in
            var result: UnsafeMutablePointer<passwd>?
            let code = getpwuid_r(uid, &entry, buffer, length, &result)
            found = result != nil
            if found, let name = entry.pw_name {
                let home = entry.pw_dir.map { String(cString: $0) } ?? ""
                account = (String(cString: name), entry.pw_gid, home.hasPrefix("/") ? home : "/")
            }
            return code
        }
        return account
    }

    private static func passwordEntry(for uid: uid_t) throws(Errno) -> (name: String, primaryGroupID: gid_t)? {
        var entry = passwd()
        var name: String?
        let found = try lookUp("getpwuid_r(\(uid))") { buffer, length, found in
            var result: UnsafeMutablePointer<passwd>?
            let code = getpwuid_r(uid, &entry, buffer, length, &result)
            found = result != nil
            // The strings point into `buffer`, so copy the name while it is alive.
            if found, let pointer = entry.pw_name { name = String(cString: pointer) }
            return code
        }
        guard found, let name else { return nil }
        return (name, entry.pw_gid)
    }

    /// Runs a `get*_r` call with a buffer that grows on `ERANGE`; returns whether an entry was found.
    ///
    /// Not routed through `systemCall`: NSS modules report "not found" as ENOENT, ESRCH, EBADF or EPERM
    /// (getgrnam_r(3)), and EBADF there is not the programmer error the helper would stop on.
    private static func lookUp(
        _ operation: @autoclosure () -> String,
        _ call: (UnsafeMutablePointer<CChar>, Int, inout Bool) -> Int32
    ) throws(Errno) -> Bool {
        var length = 1024
        while true {
            var found = false
            let code = withUnsafeTemporaryAllocation(of: CChar.self, capacity: length) { buffer in
                // `baseAddress!`: a temporary allocation of positive capacity always has an address.
                call(buffer.baseAddress!, length, &found)
            }
            switch code {
            case 0: return found
            case ENOENT, ESRCH, EBADF, EPERM: return false
            case EINTR: continue
            case ERANGE where length < 1 << 20: length *= 4
            default: throw Errno(rawValue: code, operation: operation())
            }
        }
    }
}
