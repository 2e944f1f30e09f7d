// Inputs that post notifications to apps, with the per-poster behaviour for suspended apps.

/// The outcome of `Lifecycle.post`.
public struct PostResult: Sendable {
    /// Apps the notification was sent to now (including apps woken for it).
    public var delivered: Int
    /// Suspended apps that keep it queued for when they next run.
    public var queued: Int
    /// What the shell must do.
    public var actions: [Action]
}

extension Lifecycle {
    /// `Post`: sends a notification to one app or to every registered app. Running apps get it now; suspended
    /// apps per `behavior`: dropped, coalesced (one pending entry per name with the latest payload and a count),
    /// held (bounded), or delivered after waking the app into background with `EnterBackgroundGraceSec` to
    /// acknowledge before it is suspended again.
    public mutating func post(
        name: String, payloadJSON: String?, behavior: DeliveryBehavior = .coalesce, to target: AppID? = nil,
        now: MonotonicInstant
    ) throws(LifecycleError) -> PostResult {
        let recipients: [AppID]
        if let target {
            guard let app = apps[target] else { throw .noSuchApp(target.description) }
            guard app.isRegistered, app.state != .terminated, app.state != .notRunning else {
                throw .invalidState(app: app.name, state: app.state)
            }
            recipients = [target]
        } else {
            recipients = liveNames.values.sorted().filter { tracked($0).isRegistered }
        }
        var result = PostResult(delivered: 0, queued: 0, actions: [])
        for id in recipients {
            var event = makeEvent(.notification)
            event.name = name
            event.payloadJSON = payloadJSON
            switch tracked(id).state {
            case .active, .inactive, .background:
                result.actions.append(.send(event, to: id))
                result.delivered += 1
            case .suspended where behavior == .wake:
                wake(id, now: now, into: &result.actions)
                result.actions.append(.send(event, to: id))
                modify(id) {
                    $0.pendingAcknowledgement = event.id
                    $0.acknowledgementIsForWake = true
                }
                setDeadline(.acknowledgement, of: id, at: now + tracked(id).policy.enterBackgroundGrace)
                result.delivered += 1
            case .suspended:
                if enqueue(event, for: id, behavior: behavior, now: now, into: &result.actions) { result.queued += 1 }
            case .notRunning, .terminated:
                break
            }
        }
        armTimerIfDeadlineMoved(&result.actions, now: now)
        return result
    }
}
