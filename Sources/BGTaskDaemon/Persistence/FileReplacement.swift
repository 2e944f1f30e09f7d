// Replacing a file whole, so that a reader finds the old content or the new one, never a mix: what the state file,
// the history file and the file of scheduled requests share.

import BGTaskPOSIX
import Glibc

/// Writes a temporary file beside the target, then renames it over the target.
enum FileReplacement {
    /// Writes `bytes` to a new file at `temporary` (replacing one left there), mode 0600, `fsync`ed when `durably`;
    /// removes it if the write fails.
    static func write(_ bytes: [UInt8], to temporary: String, durably: Bool = false) throws {
        let descriptor = try FileDescriptor.open(
            temporary, .writeOnly, options: [.create, .truncate, .noFollow], permissions: 0o600)
        do {
            try descriptor.writeAll(bytes)
            if durably { _ = try systemCall("fsync(\(temporary))") { fsync(descriptor.rawValue) } }
            try descriptor.close()
        } catch {
            try? descriptor.close()
            unlink(temporary)
            throw error
        }
    }

    /// Renames `temporary` over `target`; removes it if that fails. With `durably`, the directory is `fsync`ed
    /// after, so the rename itself outlives a power cut.
    static func moveIntoPlace(_ temporary: String, over target: String, durably: Bool = false) throws {
        guard Glibc.rename(temporary, target) == 0 else {
            let error = Errno(rawValue: errno, operation: "rename(\(temporary), \(target))")
            unlink(temporary)
            throw error
        }
        guard durably else { return }
        let directoryPath = StateStore.directory(of: target)
        let directory = try FileDescriptor.open(directoryPath, .readOnly, options: [.directory])
        defer { try? directory.close() }
        _ = try systemCall("fsync(\(directoryPath))") { fsync(directory.rawValue) }
    }

    /// Replaces `target` with `bytes`: a temporary file `TARGET.tmp`, then `rename`.
    static func replace(_ target: String, with bytes: [UInt8], durably: Bool = false) throws {
        let temporary = target + ".tmp"
        try write(bytes, to: temporary, durably: durably)
        try moveIntoPlace(temporary, over: target, durably: durably)
    }
}
