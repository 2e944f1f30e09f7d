// What a running bgtaskd holds, read from /proc: its resident memory and its open descriptors.

import BGTaskPOSIX
import Glibc

/// The daemon's resident memory and open descriptors at one moment, and the most memory it held so far.
struct DaemonFootprint {
    /// `VmRSS` of `/proc/PID/status`, in bytes.
    var residentBytes: Int
    /// `VmHWM` of `/proc/PID/status` (the highest `VmRSS` so far), in bytes.
    var peakResidentBytes: Int
    /// The entries of `/proc/PID/fd`.
    var descriptors: Int

    /// The resident memory in MiB.
    var residentMiB: Double { Double(residentBytes) / Double(1 << 20) }
    /// The highest resident memory so far in MiB.
    var peakResidentMiB: Double { Double(peakResidentBytes) / Double(1 << 20) }

    /// Reads the footprint of `pid` from `procFS`.
    static func read(pid: pid_t, procFS: ProcFS = ProcFS()) throws -> DaemonFootprint {
        let status = try procFS.read("\(pid)/status")
        guard let residentBytes = bytes(of: "VmRSS", status: status),
            let peakResidentBytes = bytes(of: "VmHWM", status: status)
        else {
            throw BenchError("no VmRSS and VmHWM in kB in /proc/\(pid)/status: \(status.prefix(300))")
        }
        return DaemonFootprint(
            residentBytes: residentBytes, peakResidentBytes: peakResidentBytes,
            descriptors: try procFS.listDirectory("\(pid)/fd").count)
    }

    /// Whether `pid` maps the Swift runtime from a shared library (`libswiftCore.so` in `/proc/PID/maps`).
    static func mapsSwiftRuntimeLibrary(pid: pid_t, procFS: ProcFS = ProcFS()) throws -> Bool {
        try procFS.read("\(pid)/maps").contains("/libswiftCore.so")
    }

    /// The field `name` of a `/proc/PID/status` text (`VmRSS:   10932 kB`), in bytes; nil when the line is
    /// missing or not in that form.
    static func bytes(of name: String, status: String) -> Int? {
        for line in status.split(separator: "\n") where line.hasPrefix(name + ":") {
            let words = line.dropFirst(name.count + 1).split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard words.count == 2, words[1] == "kB", let kilobytes = Int(words[0]), kilobytes >= 0 else { return nil }
            return kilobytes * 1024
        }
        return nil
    }
}
