// The one identity rule alone (`IdentityRule`), row by row: who a command of a pinned or unpinned name runs as for a
// caller, a request's owner and root, in a daemon that is root and in one that is not; whose a submitted request is;
// who may register a name.

import Glibc
import Testing

@testable import BGTaskDaemon

/// `mail` pinned to 1000, `ghost` pinned to a user that cannot be resolved, `notes` not pinned.
private let pins: [String: uid_t?] = ["mail": 1000, "ghost": nil]

/// The uid the rule gives, or nil for a refusal.
private func runsAs(_ name: String, _ requester: IdentityRequester, daemon: uid_t = 0) -> uid_t? {
    if case .success(let uid) = IdentityRule(pins: pins, daemonUID: daemon).user(ofAppNamed: name, for: requester) {
        return uid
    }
    return nil
}

@Suite("The identity rule")
struct IdentityRuleTests {
    @Test(
        "a pinned name runs as the pinned user, for itself or root asking; an unpinned one as the asker; nobody else",
        arguments: [
            // A caller of Launch: root stands for the pinned user.
            ("mail", IdentityRequester.caller(1000), uid_t?.some(1000)),
            ("mail", .caller(0), 1000),
            ("mail", .caller(1001), nil),
            // A request's owner: exactly the pinned user, root included.
            ("mail", .owner(1000), 1000),
            ("mail", .owner(0), nil),
            ("mail", .owner(1001), nil),
            // Pinned to nobody: nobody, root neither.
            ("ghost", .caller(0), nil),
            ("ghost", .owner(1000), nil),
            // No pin: as the asker, root as root.
            ("notes", .caller(1001), 1001),
            ("notes", .owner(1001), 1001),
            ("notes", .caller(0), 0),
        ] as [(String, IdentityRequester, uid_t?)])
    func launchUser(name: String, requester: IdentityRequester, expected: uid_t?) {
        #expect(runsAs(name, requester) == expected)
    }

    @Test("a daemon that is not root starts apps only as itself, whatever the pin says")
    func unprivilegedDaemon() {
        #expect(runsAs("notes", .caller(1000), daemon: 1000) == 1000)
        #expect(runsAs("notes", .owner(1001), daemon: 1000) == nil)
        #expect(runsAs("mail", .caller(1000), daemon: 1000) == 1000)
        #expect(runsAs("mail", .caller(1000), daemon: 1001) == nil)
        #expect(IdentityRule(pins: pins, daemonUID: 1001).canLaunch("mail", forRequestsOf: 1000) == false)
        #expect(IdentityRule(pins: pins, daemonUID: 0).canLaunch("mail", forRequestsOf: 1000))
    }

    @Test("a request of a pinned name is the pinned user's, submitted by it or root; an unpinned one the given owner's")
    func requestOwner() {
        let rule = IdentityRule(pins: pins, daemonUID: 0)
        func owner(_ name: String, caller: uid_t, unpinned: uid_t) -> uid_t? {
            if case .success(let uid) = rule.requestOwner(ofAppNamed: name, caller: caller, unpinnedOwner: unpinned) {
                return uid
            }
            return nil
        }
        #expect(owner("mail", caller: 1000, unpinned: 1000) == 1000)
        #expect(owner("mail", caller: 0, unpinned: 0) == 1000)
        // A live app of another user does not make the pinned name its: the pin decides.
        #expect(owner("mail", caller: 1001, unpinned: 1001) == nil)
        #expect(owner("mail", caller: 1000, unpinned: 1001) == 1000)
        #expect(owner("ghost", caller: 0, unpinned: 0) == nil)
        #expect(owner("notes", caller: 1001, unpinned: 1001) == 1001)
        #expect(owner("notes", caller: 0, unpinned: 1001) == 1001)
        #expect(owner("notes", caller: 1002, unpinned: 1001) == nil)
    }

    @Test("a pinned name registers only from the pinned user's processes, root's included in the refusal")
    func registration() {
        let rule = IdentityRule(pins: pins, daemonUID: 0)
        #expect(rule.registrationRefusal(ofAppNamed: "mail", by: 1000) == nil)
        #expect(rule.registrationRefusal(ofAppNamed: "mail", by: 0)?.description == "the name is pinned to uid 1000")
        #expect(rule.registrationRefusal(ofAppNamed: "ghost", by: 0) != nil)
        #expect(rule.registrationRefusal(ofAppNamed: "notes", by: 1234) == nil)
    }
}
