// A socket file nobody listens on any more, as a crashed daemon leaves it.

import BGTaskPOSIX

/// Leaves a socket file at `path` whose listener is gone: listened on, shut down, then closed.
///
/// Closed alone, the listener would go on taking connections while a child another test is spawning holds a copy
/// of it (every child does, from its clone to its exec: `withChildHeldBeforeExec(_:)`); shut down, it refuses them
/// whoever holds one.
public func makeStaleSocketFile(at path: String) throws {
    let listener = try UnixSocket.listen(path: path)
    try listener.closeAfter { try UnixSocket.shutdown(listener) }
}
