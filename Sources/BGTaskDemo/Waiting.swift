// Bounded waits of the narration: for a line or an entry, checking for Ctrl-C and saying what it waits for.
import Foundation

extension Feed {
    /// Waits for the first item after `mark` that `matches`, at most `timeout`; returns it and the mark past it.
    ///
    /// Checks for an interruption every 100 ms, and when the transcript has been quiet for `quietLimit` prints
    /// a progress line (`... waiting for WHAT (3.0s so far)`), so the demo never sits silent.
    func wait(
        after mark: Int, for what: String, timeout: Duration, transcript: Transcript,
        quietLimit: Duration = .milliseconds(1_500), where matches: (Item) -> Bool
    ) throws(DemoFailure) -> (item: Item, next: Int) {
        let started = ContinuousClock.now
        while true {
            try Interruption.check()
            switch first(after: mark, within: .milliseconds(100), where: matches) {
            case .found(let item, let next):
                return (item, next)
            case .ended:
                throw DemoFailure("\(what) never came: its source ended")
            case .timedOut:
                let waited = ContinuousClock.now - started
                guard waited < timeout else {
                    throw DemoFailure("gave up waiting for \(what) after \(Transcript.seconds(timeout))")
                }
                if transcript.quietFor >= quietLimit {
                    transcript.say("... waiting for \(what) (\(Transcript.seconds(waited)) so far)")
                }
            }
        }
    }
}

/// Waits for `duration` while checking for an interruption: the pause between two readings of a countdown.
func pause(_ duration: Duration) throws(DemoFailure) {
    let end = ContinuousClock.now + duration
    while true {
        try Interruption.check()
        let left = end - ContinuousClock.now
        guard left > .zero else { return }
        Thread.sleep(forTimeInterval: min(0.1, left.inSeconds))
    }
}

extension Duration {
    /// The duration in seconds.
    var inSeconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
