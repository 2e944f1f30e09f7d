// Reading back what the last daemon saved, for the manager to restore (`Manager+State.swift`).

import BGTaskCore
import BGTaskSystem

extension StatePersistence {
    /// The state the last daemon saved, its journals applied, to restore; nil when there is none, or when it
    /// cannot be used (then it is set aside and logged). The next snapshot's generation goes on from its journals.
    func loadSavedState(now: MonotonicInstant) -> DaemonState? {
        guard let store else { return nil }
        switch store.load(bootID: bootID, now: now) {
        case .none:
            return nil
        case .unusable(let reason):
            setAside(because: reason)
            return nil
        case .state(let loaded):
            continueAfterRestoring(generation: loaded.lastGeneration)
            if loaded.tornLines > 0 {
                logger.notice("the journal's last record was cut short (never acknowledged); restoring the rest")
            }
            return loaded.state
        }
    }

    /// The saved history entries up to `serial` (the restored state's `historySerial`); unreadable lines are
    /// skipped and logged.
    func loadHistory(upTo serial: Int) -> [SavedHistoryEntry] {
        guard let store else { return [] }
        let history = store.loadHistory(upTo: serial)
        if history.skipped > 0 {
            logger.warning(
                "skipped \(history.skipped) unreadable lines of \(store.historyPath); the rest of the history "
                    + "is restored")
        }
        return history.entries
    }

    /// Moves saved state that cannot be used out of the way (or removes it, where that fails), logged.
    func setAside(because reason: String) {
        guard let store else { return }
        let destination = store.setAside()
        logger.warning(
            "not restoring \(store.path): \(reason); "
                + (destination.map { "set aside as \($0)" } ?? "removing it")
                + ", starting with no apps")
        if destination == nil { store.remove() }
    }
}
