// The one rule that decides which user a command of an app name runs as, and who may ask for it: the user
// `apps.d/NAME.conf` pins the name to (`User=`) if there is one, else the caller or the request's owner. `Launch`, the
// launch for scheduled requests, the owner of a submitted request and `Register` all ask it (docs/ARCHITECTURE.md,
// "Identity").

import Glibc

/// Why the identity rule refuses, for the log; the caller is answered `PermissionDenied`.
struct IdentityRefusal: Error, CustomStringConvertible {
    let description: String
}

/// Who asks for a command of an app name to run.
enum IdentityRequester: Equatable, Sendable {
    /// A peer's call (`Launch`), by its uid: root asks for a pinned name on behalf of the user it is pinned to.
    case caller(uid_t)
    /// The owner of the scheduled requests a launch is for: exactly this uid, root included.
    case owner(uid_t)
}

/// The pins of app names (`User=` of `apps.d/NAME.conf`, resolved to uids) and the daemon's own uid, and the one
/// rule made of them: every path that decides a launched app's user, or whose requests a name's are, goes through
/// here, so no two paths can disagree.
struct IdentityRule {
    /// The uid each pinned app name belongs to; nil for a user that cannot be resolved, which pins the name to
    /// nobody (fail closed).
    let pins: [String: uid_t?]
    /// The daemon's effective uid: a daemon that is not root starts apps only as itself.
    let daemonUID: uid_t

    /// The rule for these pins, in a daemon running as `daemonUID`.
    init(pins: [String: uid_t?] = [:], daemonUID: uid_t = geteuid()) {
        self.pins = pins
        self.daemonUID = daemonUID
    }

    /// The user a command of `name` asked for by `requester` runs as: the pinned user when the name is pinned (the
    /// pinned user itself asking, or root on its behalf; a request's owner only when it is the pinned user), else
    /// the requester. Refused for a name pinned to a user that cannot be resolved, for anyone else, and for any
    /// user but its own in a daemon that is not root.
    func user(ofAppNamed name: String, for requester: IdentityRequester) -> Result<uid_t, IdentityRefusal> {
        let uid: uid_t
        switch (pins[name], requester) {
        case (nil, .caller(let asker)), (nil, .owner(let asker)):
            uid = asker
        case (.some(.none), _):
            return .failure(IdentityRefusal(description: "\(name) is pinned to a user that cannot be resolved"))
        case (.some(.some(let pinned)), .caller(let asker)) where asker == pinned || asker == 0,
            (.some(.some(let pinned)), .owner(let asker)) where asker == pinned:
            uid = pinned
        case (.some(.some(let pinned)), .caller(let asker)), (.some(.some(let pinned)), .owner(let asker)):
            return .failure(IdentityRefusal(description: "\(name) is pinned to uid \(pinned), not to uid \(asker)"))
        }
        guard uid == daemonUID || daemonUID == 0 else {
            return .failure(
                IdentityRefusal(description: "bgtaskd runs as uid \(daemonUID) and cannot start an app as uid \(uid)"))
        }
        return .success(uid)
    }

    /// The user requests of `name` submitted by `caller` belong to: the pinned user when the name is pinned, for the
    /// pinned user and root only; else `unpinnedOwner` (the live app's uid, else the owner of the requests held,
    /// else the caller), which the caller must be, or root.
    func requestOwner(
        ofAppNamed name: String, caller: uid_t, unpinnedOwner: uid_t
    ) -> Result<uid_t, IdentityRefusal> {
        switch pins[name] {
        case nil:
            guard caller == unpinnedOwner || caller == 0 else {
                return .failure(
                    IdentityRefusal(description: "the name's requests belong to uid \(unpinnedOwner)"))
            }
            return .success(unpinnedOwner)
        case .some(.none):
            return .failure(IdentityRefusal(description: "\(name) is pinned to a user that cannot be resolved"))
        case .some(.some(let pinned)):
            guard caller == pinned || caller == 0 else {
                return .failure(IdentityRefusal(description: "\(name) is pinned to uid \(pinned)"))
            }
            return .success(pinned)
        }
    }

    /// Whether the daemon can launch `name` for the requests of `owner` (`user(ofAppNamed:for: .owner(owner))`).
    func canLaunch(_ name: String, forRequestsOf owner: uid_t) -> Bool {
        if case .success = user(ofAppNamed: name, for: .owner(owner)) { return true }
        return false
    }

    /// Why `uid` may not register `name`: a pinned name registers only from the pinned user's processes (root's
    /// too are refused: a registration is a process, which runs as one user). Nil when it may.
    func registrationRefusal(ofAppNamed name: String, by uid: uid_t) -> IdentityRefusal? {
        guard let pin = pins[name], pin != uid else { return nil }
        return IdentityRefusal(
            description: "the name is pinned to "
                + (pin.map { "uid \($0)" } ?? "a user that cannot be resolved"))
    }
}
