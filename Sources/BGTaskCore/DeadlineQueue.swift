// An indexed binary min-heap of deadlines: O(log n) insert, update and removal by key, O(1) earliest.

/// A pending deadline's position in time, with the order it was scheduled in to break ties.
///
/// Two deadlines at the same instant fire in the order they were scheduled, like timers on an event loop.
public struct DeadlineOrder: Hashable, Comparable, Sendable, Codable {
    /// When the deadline falls.
    public var instant: MonotonicInstant
    /// A counter value taken when it was scheduled; lower fires first among equal instants.
    public var sequence: UInt64

    public static func < (lhs: DeadlineOrder, rhs: DeadlineOrder) -> Bool {
        lhs.instant != rhs.instant ? lhs.instant < rhs.instant : lhs.sequence < rhs.sequence
    }
}

/// A priority queue holding at most one deadline per app.
///
/// The core keeps one entry per app (its earliest pending deadline), so the shell needs one timer, and the
/// cost of every update is logarithmic in the number of apps with pending deadlines. Heap positions are kept
/// in an array indexed by the app's table slot, so moving an entry costs no hashing.
struct DeadlineQueue: Sendable {
    typealias Key = AppID

    private struct Entry: Sendable {
        var order: DeadlineOrder
        var key: Key
    }

    private var heap: [Entry] = []
    private var positions = SlotPositions()

    /// The number of keys with a deadline.
    var count: Int { heap.count }

    /// Whether no deadline is pending.
    var isEmpty: Bool { heap.isEmpty }

    /// The earliest deadline and its key.
    var first: (key: Key, order: DeadlineOrder)? {
        heap.first.map { ($0.key, $0.order) }
    }

    /// The deadline pending for `key`, if any.
    func order(of key: Key) -> DeadlineOrder? {
        positions[key].map { heap[$0].order }
    }

    /// Schedules `key` at `order`, replacing its previous deadline.
    mutating func set(_ key: Key, to order: DeadlineOrder) {
        if let index = positions[key] {
            let previous = heap[index].order
            heap[index].order = order
            if order < previous { siftUp(from: index) } else { siftDown(from: index) }
        } else {
            heap.append(Entry(order: order, key: key))
            positions[key] = heap.count - 1
            siftUp(from: heap.count - 1)
        }
    }

    /// Removes the deadline of `key`, if any.
    mutating func remove(_ key: Key) {
        guard let index = positions.removeValue(forKey: key) else { return }
        let last = heap.count - 1
        if index != last {
            heap[index] = heap[last]
            positions[heap[index].key] = index
            heap.removeLast()
            let moved = heap[index].order
            if index > 0 && moved < heap[(index - 1) / 2].order { siftUp(from: index) } else { siftDown(from: index) }
        } else {
            heap.removeLast()
        }
    }

    /// Every pending deadline, in no particular order (for invariant checks).
    var allEntries: [(key: Key, order: DeadlineOrder)] {
        heap.map { ($0.key, $0.order) }
    }

    private mutating func siftUp(from start: Int) {
        var child = start
        let entry = heap[child]
        while child > 0 {
            let parent = (child - 1) / 2
            guard entry.order < heap[parent].order else { break }
            heap[child] = heap[parent]
            positions[heap[child].key] = child
            child = parent
        }
        heap[child] = entry
        positions[entry.key] = child
    }

    private mutating func siftDown(from start: Int) {
        var parent = start
        let entry = heap[parent]
        let count = heap.count
        while true {
            let left = 2 * parent + 1
            guard left < count else { break }
            let right = left + 1
            let smaller = right < count && heap[right].order < heap[left].order ? right : left
            guard heap[smaller].order < entry.order else { break }
            heap[parent] = heap[smaller]
            positions[heap[parent].key] = parent
            parent = smaller
        }
        heap[parent] = entry
        positions[entry.key] = parent
    }
}

/// Heap positions by app-table slot; -1 where the slot has no entry.
private struct SlotPositions: Sendable {
    private var storage: [Int32] = []

    subscript(key: AppID) -> Int? {
        get {
            let slot = key.slot
            guard slot < storage.count, storage[slot] >= 0 else { return nil }
            return Int(storage[slot])
        }
        set {
            let slot = key.slot
            if slot >= storage.count {
                guard newValue != nil else { return }
                storage.append(contentsOf: repeatElement(-1, count: max(slot + 1 - storage.count, storage.count)))
            }
            storage[slot] = Int32(newValue ?? -1)
        }
    }

    mutating func removeValue(forKey key: AppID) -> Int? {
        defer { self[key] = nil }
        return self[key]
    }
}
