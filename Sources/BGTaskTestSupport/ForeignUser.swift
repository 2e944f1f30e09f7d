// Running this package's executables as another user, for tests of what an unprivileged peer can do.

import BGTaskPOSIX
import Foundation

/// Another user to run this package's executables as.
///
/// The executables are copied into a scratch directory any user may enter (the build directory may sit under a
/// home only root can enter), and started through `setpriv`, with every group dropped unless `groups` names some.
public struct ForeignUser: Sendable {
    /// The user id the programs run as.
    public let uid: UInt32
    /// The primary group id.
    public let gid: UInt32
    /// Supplementary groups; empty clears them.
    public let groups: [UInt32]
    /// Where the copied executables are.
    public let tools: ScratchDirectory

    /// `nobody` (65534) with group `nogroup` (65534), as on Debian.
    public static func nobody(executables: [String]) throws -> ForeignUser {
        try ForeignUser(uid: 65534, gid: 65534, executables: executables)
    }

    /// Prepares to run `executables` (names of this package's products) as `uid`/`gid`.
    public init(uid: UInt32, gid: UInt32, groups: [UInt32] = [], executables: [String]) throws {
        self.uid = uid
        self.gid = gid
        self.groups = groups
        tools = try ScratchDirectory(prefix: "bgtask-tools")
        for name in executables {
            try Products.copy(name, into: tools.path)
        }
    }

    /// The command line running `executable` (a name given to `init`) with `arguments` as this user.
    public func command(_ executable: String, _ arguments: [String]) -> [String] {
        let groupList = groups.isEmpty ? "--clear-groups" : "--groups=" + groups.map(String.init).joined(separator: ",")
        return ["setpriv", "--reuid=\(uid)", "--regid=\(gid)", groupList, tools.path + "/" + executable] + arguments
    }

    /// Starts `executable` with `arguments` as this user, stdin and stdout as pipes to the test.
    public func spawn(_ executable: String, _ arguments: [String]) throws -> ChildProcess {
        try ChildProcess(command(executable, arguments))
    }
}
