// The condition sources' parsers and rules, row by row: rtnetlink link and route messages crafted byte by byte
// (truncated, lying lengths), kernel uevents, and what power_supply trees say about power and the battery.

import BGTaskSystem
import Testing

/// Builds netlink datagrams in the kernel's layout (host byte order, 4-byte alignment).
private struct NetlinkBuilder {
    var bytes: [UInt8] = []

    static func number<Number: FixedWidthInteger>(_ value: Number) -> [UInt8] {
        withUnsafeBytes(of: value) { Array($0) }
    }

    static func padded(_ bytes: [UInt8]) -> [UInt8] {
        bytes + [UInt8](repeating: 0, count: (4 - bytes.count % 4) % 4)
    }

    /// An attribute: length, type, payload, padding.
    static func attribute(_ type: UInt16, _ payload: [UInt8], length: UInt16? = nil) -> [UInt8] {
        padded(number(length ?? UInt16(4 + payload.count)) + number(type) + payload)
    }

    /// A message: header (with `length` instead of the true one when given), then the body, padded.
    mutating func message(type: UInt16, flags: UInt16 = 0x2, sequence: UInt32, body: [UInt8], length: UInt32? = nil) {
        let header =
            Self.number(length ?? UInt32(16 + body.count)) + Self.number(type) + Self.number(flags)
            + Self.number(sequence) + Self.number(UInt32(0))
        bytes += Self.padded(header + body)
    }

    /// `RTM_NEWLINK` for interface `index` with `flags`.
    mutating func link(index: Int32, flags: UInt32, sequence: UInt32 = 7, removed: Bool = false) {
        let body: [UInt8] =
            [0, 0] + Self.number(UInt16(772)) + Self.number(index) + Self.number(flags) + Self.number(UInt32(0))
            + Self.attribute(3, Array("lo\0".utf8))
        message(type: removed ? 17 : 16, sequence: sequence, body: body)
    }

    /// `RTM_NEWROUTE`: family, prefix length, table (in the header and as `RTA_TABLE`), type, output interface.
    mutating func route(
        family: UInt8 = 2, destinationLength: UInt8 = 0, table: UInt32 = 254, type: UInt8 = 1, outputInterface: Int32?,
        sequence: UInt32 = 8, extra: [UInt8] = []
    ) {
        let headerTable = table > 255 ? 252 : UInt8(table)
        var body: [UInt8] = [family, destinationLength, 0, 0, headerTable, 3, 0, type] + Self.number(UInt32(0))
        body += Self.attribute(15, Self.number(table))
        if let outputInterface { body += Self.attribute(4, Self.number(outputInterface)) }
        body += extra
        message(type: 24, sequence: sequence, body: body)
    }

    mutating func done(sequence: UInt32, flags: UInt16 = 0x2) {
        message(type: 3, flags: flags, sequence: sequence, body: Self.number(Int32(0)))
    }
}

@Suite("condition source parsers")
struct ConditionSourceParsingTests {
    // MARK: rtnetlink

    @Test("a dump request is a netlink header and a zeroed body, numbered as asked")
    func dumpRequests() {
        let links = RouteNetlink.dumpRequest(.links, sequence: 5)
        #expect(links.count == 32)
        #expect(Array(links[0..<4]) == NetlinkBuilder.number(UInt32(32)))
        #expect(Array(links[4..<6]) == NetlinkBuilder.number(UInt16(18)))
        #expect(Array(links[6..<8]) == NetlinkBuilder.number(UInt16(0x301)))
        #expect(Array(links[8..<12]) == NetlinkBuilder.number(UInt32(5)))
        let routes = RouteNetlink.dumpRequest(.routes, sequence: 6)
        #expect(routes.count == 28)
        #expect(Array(routes[4..<6]) == NetlinkBuilder.number(UInt16(26)))
        #expect(routes[16...].allSatisfy { $0 == 0 })
    }

    @Test("links, routes and the end of a dump, several to a datagram")
    func wellFormedDatagram() {
        var builder = NetlinkBuilder()
        builder.link(index: 1, flags: 0x1 | 0x40 | 0x10000)
        builder.route(outputInterface: 1)
        builder.route(family: 10, destinationLength: 64, outputInterface: 1)
        builder.done(sequence: 8)
        let messages = RouteNetlink.parse(builder.bytes)
        #expect(messages.count == 4)
        #expect(messages[0] == .link(RouteNetlinkLink(index: 1, flags: 0x10041), isRemoved: false, sequence: 7))
        #expect(
            messages[1]
                == .route(
                    RouteNetlinkRoute(family: 2, destinationLength: 0, table: 254, type: 1, outputInterfaces: [1]),
                    isRemoved: false, sequence: 8))
        guard case .route(let second, _, _) = messages[2] else {
            Issue.record("not a route: \(messages[2])")
            return
        }
        #expect(second.destinationLength == 64 && second.family == 10 && !second.isDefault)
        #expect(messages[3] == .done(sequence: 8, isInterrupted: false))
    }

    @Test("a multipath default route counts each next hop's interface")
    func multipathRoute() {
        let hop1 = NetlinkBuilder.number(UInt16(8)) + [0, 0] + NetlinkBuilder.number(Int32(3))
        let hop2 = NetlinkBuilder.number(UInt16(8)) + [0, 0] + NetlinkBuilder.number(Int32(4))
        var builder = NetlinkBuilder()
        builder.route(outputInterface: nil, extra: NetlinkBuilder.attribute(9, hop1 + hop2))
        guard case .route(let route, _, _) = RouteNetlink.parse(builder.bytes).first else {
            Issue.record("no route")
            return
        }
        #expect(route.outputInterfaces == [3, 4])
        var reachability = NetworkReachability(
            links: [3: RouteNetlinkLink(index: 3, flags: 0x1), 4: RouteNetlinkLink(index: 4, flags: 0x41)],
            routes: [route])
        #expect(reachability.defaultRouteInterfaces == [4])
        reachability.links[4] = RouteNetlinkLink(index: 4, flags: 0x1)
        #expect(!reachability.isOnline)
    }

    @Test("an interrupted dump is marked; an error carries the kernel's errno")
    func doneAndError() {
        var builder = NetlinkBuilder()
        builder.done(sequence: 3, flags: 0x12)
        builder.message(
            type: 2, sequence: 4, body: NetlinkBuilder.number(Int32(-16)) + [UInt8](repeating: 0, count: 16))
        #expect(
            RouteNetlink.parse(builder.bytes) == [
                .done(sequence: 3, isInterrupted: true), .error(sequence: 4, code: -16),
            ]
        )
    }

    @Test(
        "lying and truncated lengths are refused without reading past the buffer",
        arguments: [
            // A length past the datagram.
            { () -> [UInt8] in
                var builder = NetlinkBuilder()
                builder.message(type: 16, sequence: 1, body: [UInt8](repeating: 0, count: 16), length: 4096)
                return builder.bytes
            }(),
            // A length shorter than the header.
            { () -> [UInt8] in
                var builder = NetlinkBuilder()
                builder.message(type: 16, sequence: 1, body: [UInt8](repeating: 0, count: 16), length: 8)
                return builder.bytes
            }(),
            // A header cut short after a whole message.
            { () -> [UInt8] in
                var builder = NetlinkBuilder()
                builder.done(sequence: 1)
                return builder.bytes + [20, 0, 0, 0, 16, 0]
            }(),
        ])
    func lyingMessageLengths(_ bytes: [UInt8]) {
        let messages = RouteNetlink.parse(bytes)
        guard case .malformed? = messages.last else {
            Issue.record("accepted: \(messages)")
            return
        }
    }

    @Test(
        "a link or route body too short, or an attribute whose length lies, is malformed alone",
        arguments: [
            (UInt16(16), [UInt8](repeating: 0, count: 8)),
            (UInt16(24), [UInt8](repeating: 0, count: 11)),
            // A route whose RTA_OIF claims 200 bytes.
            (
                UInt16(24),
                [2, 0, 0, 0, 254, 3, 0, 1, 0, 0, 0, 0] + NetlinkBuilder.attribute(4, [1, 0, 0, 0], length: 200)
            ),
            // An attribute length under its own header.
            (
                UInt16(24),
                [2, 0, 0, 0, 254, 3, 0, 1, 0, 0, 0, 0] + NetlinkBuilder.attribute(4, [1, 0, 0, 0], length: 2)
            ),
            // A multipath next hop claiming more than the attribute holds.
            (
                UInt16(24),
                [2, 0, 0, 0, 254, 3, 0, 1, 0, 0, 0, 0]
                    + NetlinkBuilder.attribute(9, NetlinkBuilder.number(UInt16(64)) + [0, 0, 3, 0, 0, 0])
            ),
            // An error message without its errno.
            (UInt16(2), [1, 2]),
        ])
    func lyingBodies(_ type: UInt16, _ body: [UInt8]) {
        var builder = NetlinkBuilder()
        builder.message(type: type, sequence: 9, body: body)
        builder.done(sequence: 9)
        let messages = RouteNetlink.parse(builder.bytes)
        #expect(messages.count == 2, "\(messages)")
        guard case .malformed? = messages.first else {
            Issue.record("accepted: \(messages)")
            return
        }
        #expect(messages.last == .done(sequence: 9, isInterrupted: false))
    }

    @Test("every prefix of a real-shaped datagram parses without a crash, and never more messages than it holds")
    func everyPrefix() {
        var builder = NetlinkBuilder()
        builder.link(index: 1, flags: 0x41)
        builder.route(outputInterface: 1)
        builder.done(sequence: 8)
        for length in 0...builder.bytes.count {
            #expect(RouteNetlink.parse(builder.bytes.prefix(length)).count <= 3)
        }
    }

    @Test(
        "online takes a unicast default route of the main table through an interface up and running",
        arguments: [
            // (route table, route type, prefix length, interface flags, online)
            (UInt32(254), UInt8(1), UInt8(0), UInt32(0x41), true),
            (254, 1, 0, 0x1, false),  // up, no carrier
            (254, 1, 0, 0x40, false),  // administratively down
            (255, 1, 0, 0x41, false),  // the local table
            (1000, 1, 0, 0x41, false),  // a policy routing table
            (254, 6, 0, 0x41, false),  // blackhole
            (254, 1, 8, 0x41, false),  // not a default route
        ])
    func onlineRule(table: UInt32, type: UInt8, prefix: UInt8, flags: UInt32, isOnline: Bool) {
        let reachability = NetworkReachability(
            links: [2: RouteNetlinkLink(index: 2, flags: flags)],
            routes: [
                RouteNetlinkRoute(family: 2, destinationLength: prefix, table: table, type: type, outputInterfaces: [2])
            ])
        #expect(reachability.isOnline == isOnline)
        #expect(!NetworkReachability(links: [2: RouteNetlinkLink(index: 2, flags: 0x41)]).isOnline)
    }

    // MARK: uevents

    @Test("a kernel uevent: action, path and fields")
    func uevent() throws {
        let bytes =
            Array(
                "change@/devices/LNXSYSTM:00/ACPI0003:00/power_supply/AC\0ACTION=change\0SUBSYSTEM=power_supply\0"
                    .utf8) + Array("POWER_SUPPLY_ONLINE=1\0SEQNUM=4711\0".utf8)
        let event = try #require(KernelUevent.parse(bytes))
        #expect(event.action == "change")
        #expect(event.devicePath == "/devices/LNXSYSTM:00/ACPI0003:00/power_supply/AC")
        #expect(event.subsystem == "power_supply")
        #expect(event.properties["POWER_SUPPLY_ONLINE"] == "1")
    }

    @Test(
        "what is not a kernel uevent is refused",
        arguments: [
            Array("libudev\0\u{1}\u{2}".utf8), Array("".utf8), Array("@/devices\0".utf8), Array("change@\0".utf8),
            Array("change@/x\0NOEQUALS\0".utf8), Array("change@/x\0=value\0".utf8), [0x63, 0x40, 0xff, 0xfe, 0],
            Array("add@/x\0".utf8) + Array(repeating: Array("A=1\0".utf8), count: 65).flatMap { $0 },
        ])
    func notUevents(_ bytes: [UInt8]) {
        #expect(KernelUevent.parse(bytes) == nil)
    }

    // MARK: power_supply

    @Test(
        "external power and the battery, from the supplies",
        arguments: [
            // (supplies, on external power, battery not low at 15 %)
            ([PowerSupply](), true, true),
            ([PowerSupply(name: "AC", type: "Mains", online: 1)], true, true),
            ([PowerSupply(name: "AC", type: "Mains", online: 0)], false, true),
            (
                [
                    PowerSupply(name: "AC", type: "Mains", online: 0),
                    PowerSupply(name: "USB", type: "USB_C", online: 1),
                ], true, true
            ),
            (
                [
                    PowerSupply(name: "AC", type: "Mains", online: 0),
                    PowerSupply(name: "BAT0", type: "Battery", capacity: 15),
                ],
                false, false
            ),
            (
                [
                    PowerSupply(name: "AC", type: "Mains", online: 0),
                    PowerSupply(name: "BAT0", type: "Battery", capacity: 16),
                ],
                false, true
            ),
            (
                [
                    PowerSupply(name: "AC", type: "Mains", online: 1),
                    PowerSupply(name: "BAT0", type: "Battery", capacity: 3),
                ],
                true, true
            ),
            (
                [
                    PowerSupply(name: "AC", type: "Mains", online: 0),
                    PowerSupply(name: "BAT0", type: "Battery", capacity: 50, capacityLevel: "Critical"),
                ], false, false
            ),
            // A battery alone: discharging means on battery, anything else on external power.
            ([PowerSupply(name: "BAT0", type: "Battery", capacity: 5, status: "Discharging")], false, false),
            ([PowerSupply(name: "BAT0", type: "Battery", capacity: 5, status: "Charging")], true, true),
            // A mouse's battery is not the machine's.
            (
                [
                    PowerSupply(name: "AC", type: "Mains", online: 0),
                    PowerSupply(name: "hid-mouse", type: "Battery", capacity: 2, scope: "Device"),
                ], false, true
            ),
            (
                [PowerSupply(name: "hid-mouse", type: "Battery", capacity: 2, status: "Discharging", scope: "Device")],
                true, true
            ),
        ])
    func powerRules(_ supplies: [PowerSupply], isOnExternalPower: Bool, isBatteryNotLow: Bool) {
        let snapshot = PowerSupplySnapshot(supplies: supplies)
        #expect(snapshot.isOnExternalPower == isOnExternalPower, "\(snapshot.summary)")
        #expect(snapshot.isBatteryNotLow(lowPercent: 15) == isBatteryNotLow, "\(snapshot.summary)")
    }
}
