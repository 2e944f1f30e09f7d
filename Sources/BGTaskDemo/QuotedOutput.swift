// An app's output as the narration uses it: split into lines, each quoted in the transcript and kept to wait on.
import Glibc

/// An app whose output lines the demo quotes and waits on, whoever started it: the demo itself (`SampleAppProcess`)
/// or the daemon (`LaunchedApp`).
protocol QuotedApp: AnyObject {
    /// The app's name, as it registers and as its lines are quoted.
    var name: String { get }
    /// Every line it printed so far.
    var lines: Feed<String> { get }
    /// Its process.
    var pid: pid_t { get }
}

extension QuotedApp {
    /// Waits for the first line after `mark` that starts with `prefix`; returns it and the mark past it.
    @discardableResult
    func waitForLine(
        startingWith prefix: String, after mark: Int, timeout: Duration, transcript: Transcript
    ) throws(DemoFailure) -> (line: String, next: Int) {
        let found = try lines.wait(
            after: mark, for: "\(name)'s \"\(prefix)...\" line", timeout: timeout, transcript: transcript
        ) { $0.hasPrefix(prefix) }
        return (found.item, found.next)
    }
}

/// Bytes read from an app's output, cut into whole lines; each one is quoted as `source` and appended to `lines`.
struct QuotedLines {
    let source: String
    let lines: Feed<String>
    let transcript: Transcript
    private var buffer: [UInt8] = []

    init(source: String, lines: Feed<String>, transcript: Transcript) {
        self.source = source
        self.lines = lines
        self.transcript = transcript
    }

    /// Takes `chunk`, and passes on every line it completes.
    mutating func append(_ chunk: [UInt8]) {
        buffer += chunk
        while let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
            emit(String(decoding: buffer[..<newline], as: UTF8.self))
            buffer.removeSubrange(...newline)
        }
    }

    /// The output ended: passes on a last line without its newline, if any, and closes `lines`.
    mutating func finish() {
        if !buffer.isEmpty { emit(String(decoding: buffer, as: UTF8.self)) }
        buffer = []
        lines.close()
    }

    private func emit(_ line: String) {
        transcript.quote(source, line)
        lines.append(line)
    }
}
