// The demo's output: narration, scene headings, and quotes of what the apps and the daemon said, with the time.
import BGTaskArguments
import BGTaskCLI
import Synchronization

/// Everything the demo prints, one whole line at a time from any thread, each stamped with the seconds since
/// the demo started, so the pace of what happens (a countdown, a grace period) can be read off the transcript.
///
/// Narration starts at the left; quotes are indented and name their source: `uploader | event didEnterBackground
/// id=2` is a line the uploader app printed, `bgtaskd | ...` an entry of the daemon's audit trail.
final class Transcript: Sendable {
    private let output: any TextOutput
    private let started = ContinuousClock.now
    /// Serializes whole lines (app readers, the audit follower and the narration write from different threads)
    /// and holds when the last one was written.
    private let lock = Mutex(ContinuousClock.now)

    /// The width the quoted sources are right-aligned to: the longest name the demo uses.
    static let sourceWidth = 8

    init(output: any TextOutput) {
        self.output = output
    }

    /// Seconds since the demo started.
    var elapsed: Duration { ContinuousClock.now - started }

    /// A scene's heading, after an empty line.
    func heading(_ title: String) {
        write("\n== \(title) ==\n")
    }

    /// A line of narration.
    func say(_ text: String) {
        line(text)
    }

    /// Lines of a table or a listing, indented under the narration line before them.
    func block(_ text: String) {
        for row in text.split(separator: "\n") {
            // A table's last column is padded too: trailing blanks would only be noise in a saved transcript.
            var trimmed = Substring(row)
            while trimmed.last == " " { trimmed.removeLast() }
            line("    " + trimmed)
        }
    }

    /// A line that `source` (an app, or `bgtaskd`) printed or recorded, quoted as it was.
    func quote(_ source: String, _ text: String) {
        let padding = String(repeating: " ", count: max(0, Self.sourceWidth - source.count))
        line("  \(padding)\(Formatting.printable(source)) | \(Formatting.printable(text))")
    }

    private func line(_ text: String) {
        write(Self.stamp(elapsed) + "  " + text + "\n")
    }

    private func write(_ text: String) {
        lock.withLock { lastWrite in
            output.write(text)
            lastWrite = ContinuousClock.now
        }
    }

    /// How long nothing was printed: the narration prints a progress line when a wait has been quiet a while.
    var quietFor: Duration { ContinuousClock.now - lock.withLock { $0 } }

    /// `  3.42s`: the elapsed time, right-aligned so the lines' text starts in one column.
    static func stamp(_ elapsed: Duration) -> String {
        let text = seconds(elapsed)
        return String(repeating: " ", count: max(0, 7 - text.count)) + text
    }

    /// A duration as seconds with two decimals: `3.42s`.
    static func seconds(_ duration: Duration) -> String {
        seconds(duration.inSeconds)
    }

    /// Seconds with two decimals, rounded down (a remaining time is never shown as more than there is):
    /// `3.42s`.
    static func seconds(_ value: Double) -> String {
        let hundredths = Int((max(0, value) * 100).rounded(.down))
        let fraction = hundredths % 100
        return "\(hundredths / 100).\(fraction < 10 ? "0" : "")\(fraction)s"
    }
}
