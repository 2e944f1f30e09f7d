// Scratch directories: fresh and distinct, in the base asked for, opened to other users only when asked, and a
// clear error naming the call when the base is missing.
import BGTaskPOSIX
import Glibc
import Testing

@Suite struct TemporaryDirectoryTests {
    private func mode(_ path: String) -> mode_t {
        var status = stat()
        #expect(stat(path, &status) == 0)
        return status.st_mode & 0o7777
    }

    @Test func makesDistinctDirectoriesNamedByThePrefixInTheBase() throws {
        let parent = try TemporaryDirectory.make(prefix: "bgtask-tempdir-test", worldTraversable: false)
        defer { rmdir(parent) }
        let first = try TemporaryDirectory.make(prefix: "scratch", in: parent)
        defer { rmdir(first) }
        let second = try TemporaryDirectory.make(prefix: "scratch", in: parent)
        defer { rmdir(second) }
        #expect(first != second)
        for path in [first, second] {
            #expect(path.hasPrefix(parent + "/scratch-"))
            #expect(path.utf8.count == (parent + "/scratch-XXXXXX").utf8.count)
            #expect(mode(path) == 0o755)
        }
        #expect(mode(parent) == 0o700)
    }

    @Test func aMissingBaseIsAnErrorNamingTheCall() throws {
        let parent = try TemporaryDirectory.make(prefix: "bgtask-tempdir-test")
        defer { rmdir(parent) }
        let missing = parent + "/absent"
        do {
            _ = try TemporaryDirectory.make(prefix: "scratch", in: missing)
            Issue.record("made a directory under a missing base")
        } catch {
            #expect(error == .noSuchFileOrDirectory)
            #expect(error.description.hasPrefix("mkdtemp(\(missing)/scratch-XXXXXX): "))
        }
    }
}
