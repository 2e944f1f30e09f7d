// A named thread running one closure, detached: what Foundation's `Thread` gave the client library, without
// Foundation.
import CPOSIX
import Glibc

/// Starts threads that run a closure to its end and are never joined.
public enum DetachedThread {
    /// Runs `body` on a new detached thread named `name` (15 bytes at most show in `/proc/PID/task/TID/comm`).
    public static func start(name: String, _ body: @escaping @Sendable () -> Void) throws(Errno) {
        let box = Unmanaged.passRetained(ThreadClosure(name: name, body: body)).toOpaque()
        var handle = pthread_t()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        let result = pthread_create(&handle, &attributes, detachedThreadEntry, box)
        guard result == 0 else {
            Unmanaged<ThreadClosure>.fromOpaque(box).release()
            throw Errno(rawValue: result, operation: "pthread_create(\(name))")
        }
    }
}

private final class ThreadClosure {
    let name: String
    let body: @Sendable () -> Void

    init(name: String, body: @escaping @Sendable () -> Void) {
        self.name = String(decoding: name.utf8.prefix(15), as: UTF8.self)
        self.body = body
    }
}

private let detachedThreadEntry: @convention(c) (UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? = { raw in
    guard let raw else { return nil }
    let closure = Unmanaged<ThreadClosure>.fromOpaque(raw).takeRetainedValue()
    _ = closure.name.withCString { bgtask_set_thread_name($0) }
    closure.body()
    return nil
}
