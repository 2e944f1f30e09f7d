// Nothing acknowledged before it is saved: replies, events, Watch entries and stops of processes wait for the
// write that covers the change they reflect.

extension StatePersistence {
    /// What waits for a write: a message for a client (`transmit`), or anything else (`whenStateSaved`).
    enum HeldOutput {
        case message([UInt8], ClientConnection)
        case action(() -> Void)
    }

    /// Runs `action` once the state as it is now is saved: at once when nothing is waiting to be saved.
    ///
    /// Replies, events and `Watch` entries go out this way (`transmit`), and so do the stops of processes: a
    /// client never learns of a change (a task id, a state) that a crash right after could lose, and no process
    /// is stopped before the state file says so, since after a crash that file is how the service's clean-up
    /// finds what to continue. Writes are coalesced, so a burst of calls waits for one write.
    func whenStateSaved(_ action: @escaping () -> Void) {
        guard store != nil, savedGeneration < stateGeneration, !isFinalStateSaved else {
            action()
            return
        }
        heldUntilSaved.append((stateGeneration, .action(action)))
    }

    /// Sends a reply, event or entry to a client once the state it reflects is saved, in order with what went
    /// before it on that connection. A reply that reflects no change (`reflectsChange` false: a read, an invalid
    /// message) waits only for what went before it.
    func transmit(_ message: [UInt8], on connection: ClientConnection, reflectsChange: Bool = true) {
        let isBehindUnsaved = reflectsChange && (savedGeneration < stateGeneration || !heldUntilSaved.isEmpty)
        guard store != nil, isBehindUnsaved || connection.heldOutputBytes > 0, !isFinalStateSaved else {
            connection.send(message)
            return
        }
        connection.heldOutputBytes += message.count
        heldUntilSaved.append((stateGeneration, .message(message, connection)))
    }

    /// Runs what waited for writes that have finished, in order.
    func releaseHeld() {
        var released = 0
        while released < heldUntilSaved.count, heldUntilSaved[released].generation <= savedGeneration {
            released += 1
        }
        guard released > 0 else { return }
        let ready: ArraySlice<(generation: Int, output: HeldOutput)>
        if released == heldUntilSaved.count {
            // All of it, as after a lease call: nothing to move down.
            ready = heldUntilSaved[...]
            heldUntilSaved = []
        } else {
            ready = heldUntilSaved.prefix(released)
            heldUntilSaved.removeFirst(released)
        }
        for (_, output) in ready {
            switch output {
            case .message(let message, let connection):
                connection.sendHeld(message)
            case .action(let action):
                action()
            }
        }
    }

    /// Whether every change is saved and nothing waits for a write (for tests stepping the manager).
    var isSettled: Bool {
        !isDirty && !isSnapshotInFlight && heldUntilSaved.isEmpty
    }
}
