// The policy's apps by identity: slots indexed straight from the identity, reused once an app is forgotten.

/// A table of app records addressed by `AppID` without hashing.
///
/// Each identity names its slot; the record in the slot must carry the same identity, so an identity of a
/// forgotten app never reaches the app that reused its slot.
struct AppTable: Sendable {
    private var slots: [AppRecord?] = []
    /// The identity stored in each slot (0 when empty): `contains` must not touch the records themselves.
    private var identities: [Int64] = []
    private var freeSlots: [Int] = []
    private var nextSerial: Int64 = 1

    /// Number of records.
    private(set) var count = 0

    /// A fresh identity, with a slot reserved for it.
    mutating func makeID() -> AppID {
        defer { nextSerial += 1 }
        if let slot = freeSlots.popLast() {
            return AppID(serial: nextSerial, slot: slot)
        }
        slots.append(nil)
        identities.append(0)
        precondition(slots.count < 1 << AppID.slotBits, "more than 16 million apps at once")
        return AppID(serial: nextSerial, slot: slots.count - 1)
    }

    /// Stores the record of an identity made by `makeID()`.
    mutating func insert(_ record: AppRecord) {
        precondition(slots[record.id.slot] == nil, "slot of \(record.id) is taken")
        slots[record.id.slot] = record
        identities[record.id.slot] = record.id.rawValue
        count += 1
    }

    /// Forgets a record and frees its slot.
    mutating func remove(_ id: AppID) {
        guard contains(id) else { return }
        slots[id.slot] = nil
        identities[id.slot] = 0
        freeSlots.append(id.slot)
        count -= 1
    }

    /// Whether `id` names a record in the table.
    func contains(_ id: AppID) -> Bool {
        id.slot < identities.count && identities[id.slot] == id.rawValue
    }

    /// The record of `id`, if present. Reads and in-place changes go straight to the slot without copying
    /// the record; a change must not add or remove the record (use `insert` and `remove`).
    subscript(id: AppID) -> AppRecord? {
        _read {
            if contains(id) { yield slots[id.slot] } else { yield nil }
        }
        _modify {
            precondition(contains(id), "no record for \(id)")
            yield &slots[id.slot]
            precondition(slots[id.slot] != nil, "a record of \(id) was removed in place")
        }
    }

    /// How many records satisfy `predicate`, reading them in place.
    func count(where predicate: (AppRecord) -> Bool) -> Int {
        var total = 0
        for index in slots.indices where slots[index].map(predicate) == true { total += 1 }
        return total
    }

    /// Every record, in slot order.
    var values: [AppRecord] {
        slots.compactMap { $0 }
    }
}
