// Where the daemon's socket is: an explicit path, BGTASK_SOCKET, the per-user runtime directory, or the system one.

/// Finds the path of bgtaskd's Varlink socket, the same way for every client (`bgtask`, apps, tests).
public enum DaemonSocket {
    /// The environment variable that names the socket when no explicit path is given.
    public static let environmentVariable = "BGTASK_SOCKET"

    /// The socket's file name: the daemon names it after the interface it serves.
    public static let fileName = LifecycleInterface.name

    /// The directory of the system daemon's socket, the service's `RuntimeDirectory=bgtaskd`.
    public static let systemDirectory = "/run/bgtaskd"

    /// The socket of the system daemon.
    public static let systemPath = systemDirectory + "/" + fileName

    /// The socket path to use.
    ///
    /// In order: `explicit` (a `--socket` option), then `$BGTASK_SOCKET`, then with `user` the per-user daemon's
    /// `$XDG_RUNTIME_DIR/bgtaskd/io.bgtask.Lifecycle` (as `systemctl --user` runs it), else the system daemon's
    /// `/run/bgtaskd/io.bgtask.Lifecycle`. Empty values count as unset. Throws `.runtimeDirectoryUnset` when
    /// `user` is asked for and `XDG_RUNTIME_DIR` is unset or not an absolute path (the XDG spec says to ignore a
    /// relative one).
    public static func path(explicit: String?, user: Bool, environment: [String: String]) throws(ClientError)
        -> String
    {
        if let explicit, !explicit.isEmpty { return explicit }
        if let fromEnvironment = environment[environmentVariable], !fromEnvironment.isEmpty { return fromEnvironment }
        guard user else { return systemPath }
        guard var runtimeDirectory = environment["XDG_RUNTIME_DIR"], runtimeDirectory.hasPrefix("/") else {
            throw .runtimeDirectoryUnset
        }
        while runtimeDirectory.count > 1 && runtimeDirectory.hasSuffix("/") {
            runtimeDirectory.removeLast()
        }
        let separator = runtimeDirectory == "/" ? "" : "/"
        return runtimeDirectory + separator + "bgtaskd/" + fileName
    }
}
