// A growing list of what a source said (an app's lines, the daemon's audit entries) that the narration waits on.
import Foundation

/// Items appended by one reader thread and awaited by the narration, in the order they arrived.
///
/// The narration takes a `mark` (the count so far) before it makes something happen, then waits for the first
/// item after the mark that matches: so it never mistakes an earlier line for the answer, and never misses one
/// that arrived before it started waiting.
final class Feed<Item: Sendable>: @unchecked Sendable {
    // @unchecked: `items` and `isClosed` are only read and written with `condition` locked.
    private let condition = NSCondition()
    private var items: [Item] = []
    private var isClosed = false

    /// The number of items so far: a mark for `first(after:...)`.
    var mark: Int {
        condition.lock()
        defer { condition.unlock() }
        return items.count
    }

    /// Adds an item and wakes the waiters.
    func append(_ item: Item) {
        condition.lock()
        items.append(item)
        condition.broadcast()
        condition.unlock()
    }

    /// Marks the end: no item will follow (the app's output closed, the audit stream ended).
    func close() {
        condition.lock()
        isClosed = true
        condition.broadcast()
        condition.unlock()
    }

    /// The outcome of a bounded wait.
    enum Outcome {
        /// The first matching item after the mark, and the mark just past it.
        case found(Item, next: Int)
        /// No match came within the time given.
        case timedOut
        /// The source ended without a match.
        case ended
    }

    /// Waits at most `slice` for the first item at index `mark` or later that `matches`.
    ///
    /// The narration waits in slices so that between them it can check for an interruption and print progress.
    func first(after mark: Int, within slice: Duration, where matches: (Item) -> Bool) -> Outcome {
        let limit = Date(timeIntervalSinceNow: slice.inSeconds)
        condition.lock()
        defer { condition.unlock() }
        var index = mark
        while true {
            while index < items.count {
                if matches(items[index]) { return .found(items[index], next: index + 1) }
                index += 1
            }
            if isClosed { return .ended }
            guard condition.wait(until: limit) else {
                // One more look: an item may have come with the timeout.
                while index < items.count {
                    if matches(items[index]) { return .found(items[index], next: index + 1) }
                    index += 1
                }
                return .timedOut
            }
        }
    }
}
