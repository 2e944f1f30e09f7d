// The bounded queue of events waiting for a suspended app: coalescing by name in constant time, oldest dropped first.

/// An event waiting for a suspended app, with how it was posted.
struct QueuedEvent: Sendable, Codable {
    var event: AppEvent
    var behavior: DeliveryBehavior
}

/// The events a suspended app will receive when it next runs, oldest first, at most `limit` of them.
///
/// Every behaviour shares the one bound (`QueuedEventsPerAppMax`): a coalesced entry per distinct event name and
/// each held post count alike, so a poster cannot grow a suspended app's queue by varying names. Past the bound
/// the oldest entry is dropped and counted. Coalescing finds an event's pending entry through an index by kind
/// and name, so a post costs the same whether the queue is empty or full.
package struct EventQueue: Sendable, Codable {
    /// What coalescing merges on: the event's kind and, for notifications, its name.
    private struct CoalescingKey: Hashable, Sendable {
        var kind: EventKind
        var name: String?
    }

    /// Entries; the live ones are `storage[head...]`. Dropping the oldest advances `head`; the consumed prefix is
    /// compacted away once it is the larger part, so each entry is moved at most a constant number of times.
    private var storage: [QueuedEvent] = []
    private var head = 0
    /// The position (counted since the queue was created) of `storage[0]`; positions never change, so the index
    /// below stays valid across compactions.
    private var firstPosition = 0
    /// The position of the pending coalesced entry for each key.
    private var coalescingIndex: [CoalescingKey: Int] = [:]

    /// The number of events waiting.
    package var count: Int { storage.count - head }

    /// Whether nothing is waiting.
    package var isEmpty: Bool { count == 0 }

    /// The waiting entries, oldest first.
    var entries: ArraySlice<QueuedEvent> { storage[head...] }

    /// Queues `event` per `behavior`, keeping at most `limit` entries. Returns whether the event was kept (a drop
    /// or wake behaviour keeps nothing) and how many older entries were dropped to make room.
    mutating func enqueue(
        _ event: AppEvent, behavior: DeliveryBehavior, limit: Int
    ) -> (isKept: Bool, droppedCount: Int) {
        switch behavior {
        case .drop, .wake:
            return (false, 0)
        case .coalesce:
            let key = CoalescingKey(kind: event.kind, name: event.name)
            if let position = coalescingIndex[key] {
                let index = position - firstPosition
                var merged = event
                merged.id = storage[index].event.id
                merged.count = (storage[index].event.count ?? 1) + 1
                storage[index].event = merged
                return (true, 0)
            }
            var first = event
            first.count = 1
            coalescingIndex[key] = firstPosition + storage.count
            storage.append(QueuedEvent(event: first, behavior: .coalesce))
        case .hold:
            storage.append(QueuedEvent(event: event, behavior: .hold))
        }
        var dropped = 0
        while count > max(1, limit) {
            dropOldest()
            dropped += 1
        }
        return (true, dropped)
    }

    /// An empty queue.
    init() {}

    /// A queue holding `entries`, oldest first, as `entries` gave them (restoring a saved state); the coalescing
    /// index is rebuilt. Entries past `limit` are dropped, oldest first, as `enqueue` would have.
    init(restoring entries: [QueuedEvent], limit: Int) {
        for entry in entries.suffix(max(1, limit)) {
            if entry.behavior == .coalesce {
                coalescingIndex[CoalescingKey(kind: entry.event.kind, name: entry.event.name)] = storage.count
            }
            storage.append(entry)
        }
    }

    /// Empties the queue, returning its events oldest first.
    mutating func removeAll() -> [AppEvent] {
        let events = storage[head...].map(\.event)
        self = EventQueue()
        return events
    }

    private mutating func dropOldest() {
        let oldest = storage[head]
        if oldest.behavior == .coalesce {
            coalescingIndex[CoalescingKey(kind: oldest.event.kind, name: oldest.event.name)] = nil
        }
        head += 1
        if head >= 32 && head * 2 >= storage.count {
            storage.removeFirst(head)
            firstPosition += head
            head = 0
        }
    }
}

extension EventQueue {
    /// Saved as its waiting entries, oldest first; the coalescing index is rebuilt on decoding.
    package init(from decoder: any Decoder) throws {
        self.init(restoring: try [QueuedEvent](from: decoder), limit: .max)
    }

    package func encode(to encoder: any Encoder) throws {
        try Array(entries).encode(to: encoder)
    }
}
