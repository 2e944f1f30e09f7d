// Writing to standard error without Foundation's non-Sendable `stderr` global.

#if canImport(Glibc)
    import Glibc
#endif

/// A raw file descriptor to write text to.
struct FileDescriptorOutput {
    let descriptor: Int32

    static let standardError = FileDescriptorOutput(descriptor: 2)

    func write(_ text: String) {
        var remaining = Array(text.utf8)[...]
        while !remaining.isEmpty {
            let written = remaining.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return }
            remaining = remaining.dropFirst(written)
        }
    }
}
