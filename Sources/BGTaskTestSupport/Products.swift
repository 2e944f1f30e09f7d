// Finding the executables this package built, and scratch directories for tests.

import BGTaskPOSIX
import Foundation
import Glibc

/// The executables of this package, next to the running test binary in the build directory.
public enum Products {
    /// The build directory holding the test binary and the package's executables.
    public static let directory: String = {
        // Safe enough for tests: /proc/self/exe always resolves for a running process.
        let executable =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
            ?? CommandLine.arguments[0]
        var url = URL(fileURLWithPath: executable).deletingLastPathComponent()
        // An .xctest bundle directory (when the runner loads it) sits in the build directory too.
        while url.path.hasSuffix(".xctest") || url.lastPathComponent == "MacOS" { url.deleteLastPathComponent() }
        return url.path
    }()

    /// The package's root directory (where Package.swift is), for fixtures kept in the source tree.
    public static let packageRoot: String = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    /// The path of the executable `name`; fails the caller with a clear message if it was not built.
    public static func path(_ name: String) throws -> String {
        let path = directory + "/" + name
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw HarnessError("\(name) is not built in \(directory): run `swift build` first")
        }
        return path
    }

    /// Copies the built executable `name` into `directory`, to be run from there.
    ///
    /// `cp` writes the copy, not this process: a descriptor open for writing here would be inherited by every child
    /// another test forks meanwhile and held until that child's exec, and while any process holds the file open for
    /// writing the kernel refuses to exec it (ETXTBSY, "Text file busy").
    public static func copy(_ name: String, into directory: String) throws {
        let (status, output) = try runProgram(["/bin/cp", "--preserve=mode", try path(name), directory + "/" + name])
        guard status == 0 else { throw HarnessError("cannot copy \(name) into \(directory): \(output)") }
    }
}

/// A failure of the test harness itself, with a message saying what to do.
public struct HarnessError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// A scratch directory, world-traversable (mode 0755) so processes run as another user can reach sockets
/// in it, removed with its contents by `remove()`.
public final class ScratchDirectory: Sendable {
    /// Its path.
    public let path: String

    /// Creates a fresh directory under `$TMPDIR` (or `/tmp`); the prefix shows in its name.
    public init(prefix: String = "bgtask-test") throws {
        do {
            path = try TemporaryDirectory.make(prefix: prefix)
        } catch {
            throw HarnessError("cannot make a scratch directory: \(error)")
        }
    }

    /// Writes `text` to `name` inside the directory (making the directories above it) and returns the file's path.
    @discardableResult
    public func write(_ name: String, _ text: String) throws -> String {
        try write(name, Data(text.utf8))
    }

    /// Writes `data` to `name` inside the directory (making the directories above it) and returns the file's path.
    ///
    /// The file is made mode 0644 and new directories 0755 whatever the umask, as an administrator's files are: bgtaskd
    /// refuses configuration that group or others may write, which a umask of 002 would make.
    @discardableResult
    public func write(_ name: String, _ data: Data) throws -> String {
        let file = path + "/" + name
        try FileManager.default.createDirectory(
            atPath: (file as NSString).deletingLastPathComponent, withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o755])
        try data.write(to: URL(fileURLWithPath: file))
        guard chmod(file, 0o644) == 0 else { throw HarnessError("chmod \(file): \(String(cString: strerror(errno)))") }
        return file
    }

    /// Removes the directory and everything in it, unless `BGTASK_KEEP_TEST_DIRS=1` asks to keep it for a
    /// post-mortem (its path is then printed).
    public func remove() {
        if ProcessInfo.processInfo.environment["BGTASK_KEEP_TEST_DIRS"] == "1" {
            print("kept \(path)")
            return
        }
        try? FileManager.default.removeItem(atPath: path)
    }

    deinit { remove() }
}
