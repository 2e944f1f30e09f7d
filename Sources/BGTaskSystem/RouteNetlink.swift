// rtnetlink (NETLINK_ROUTE) as the network condition reads it: the dump requests, a parser of the kernel's link and
// route messages that never reads past its buffer, and the rule that says whether the host is online.

/// The numbers of rtnetlink's ABI this file uses (`<linux/netlink.h>`, `<linux/rtnetlink.h>`, `<linux/if.h>`): fixed
/// since Linux 2.2, so spelled here rather than imported through a C header the parser would then depend on.
public enum RouteNetlink {
    /// `NETLINK_ROUTE`: the protocol of the socket.
    public static let protocolNumber: Int32 = 0
    /// `RTMGRP_LINK | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE`: links appearing, changing and going, and IPv4 and IPv6
    /// routes added and removed.
    public static let linkAndRouteGroups: UInt32 = 0x1 | 0x40 | 0x400

    /// `NLMSG_ERROR`, `NLMSG_DONE`: the end of a request's answer.
    static let errorType: UInt16 = 2
    static let doneType: UInt16 = 3
    /// `RTM_NEWLINK`, `RTM_DELLINK`, `RTM_GETLINK`.
    static let newLinkType: UInt16 = 16
    static let deleteLinkType: UInt16 = 17
    static let getLinkType: UInt16 = 18
    /// `RTM_NEWROUTE`, `RTM_DELROUTE`, `RTM_GETROUTE`.
    static let newRouteType: UInt16 = 24
    static let deleteRouteType: UInt16 = 25
    static let getRouteType: UInt16 = 26
    /// `NLM_F_REQUEST | NLM_F_DUMP` (`NLM_F_ROOT | NLM_F_MATCH`): every object of the kind, in as many datagrams as
    /// it takes, then `NLMSG_DONE`.
    static let dumpRequestFlags: UInt16 = 0x1 | 0x300
    /// `NLM_F_DUMP_INTR`: the objects changed while the kernel dumped them; the dump may be inconsistent.
    static let dumpInterruptedFlag: UInt16 = 0x10

    /// `sizeof(struct nlmsghdr)`, `sizeof(struct ifinfomsg)`, `sizeof(struct rtmsg)`, `sizeof(struct rtattr)`.
    static let headerSize = 16
    static let linkInfoSize = 16
    static let routeInfoSize = 12
    static let attributeHeaderSize = 4
    /// `sizeof(struct rtnexthop)`: length, flags, hops, interface index.
    static let nextHopSize = 8

    /// `RTA_OIF`, `RTA_MULTIPATH`, `RTA_TABLE`: a route's output interface, its next hops, its table beyond 255.
    static let outputInterfaceAttribute: UInt16 = 4
    static let multipathAttribute: UInt16 = 9
    static let tableAttribute: UInt16 = 15
    /// `RT_TABLE_MAIN`: the table `ip route` shows and the default route lives in.
    public static let mainTable: UInt32 = 254
    /// `RTN_UNICAST`: a route that forwards (not `unreachable`, `blackhole`, `prohibit`, local or broadcast).
    public static let unicastRouteType: UInt8 = 1

    /// `IFF_UP` (administratively up) and `IFF_RUNNING` (operationally up: carrier, or always for loopback).
    public static let upFlag: UInt32 = 0x1
    public static let runningFlag: UInt32 = 0x40

    /// A dump request (`RTM_GETLINK` or `RTM_GETROUTE` with `NLM_F_DUMP`) for every address family, numbered
    /// `sequence`: a netlink header and a zeroed `ifinfomsg` or `rtmsg`.
    public static func dumpRequest(_ kind: DumpKind, sequence: UInt32) -> [UInt8] {
        let bodySize = kind == .links ? linkInfoSize : routeInfoSize
        let length = headerSize + bodySize
        var bytes: [UInt8] = []
        bytes.reserveCapacity(length)
        append(UInt32(length), to: &bytes)
        append(kind == .links ? getLinkType : getRouteType, to: &bytes)
        append(dumpRequestFlags, to: &bytes)
        append(sequence, to: &bytes)
        append(UInt32(0), to: &bytes)
        bytes += [UInt8](repeating: 0, count: bodySize)
        return bytes
    }

    /// What a dump asks for.
    public enum DumpKind: Hashable, Sendable {
        case links
        case routes
    }

    private static func append<Number: FixedWidthInteger>(_ number: Number, to bytes: inout [UInt8]) {
        withUnsafeBytes(of: number) { bytes += $0 }
    }

    /// Reads every netlink message of one datagram. A message whose length field is shorter than its header, or
    /// runs past the datagram, ends the datagram with `.malformed` (nothing after it can be framed); a link or route
    /// message too short for its fixed part, or an attribute whose length lies, is `.malformed` alone and the
    /// messages after it are still read. Never reads outside `datagram`.
    public static func parse(_ datagram: some Collection<UInt8>) -> [RouteNetlinkMessage] {
        let bytes = Array(datagram)[...]
        var messages: [RouteNetlinkMessage] = []
        var offset = 0
        while bytes.count - offset >= headerSize {
            let length = Int(readUInt32(bytes, offset))
            let type = readUInt16(bytes, offset + 4)
            let flags = readUInt16(bytes, offset + 6)
            let sequence = readUInt32(bytes, offset + 8)
            guard length >= headerSize, length <= bytes.count - offset else {
                messages.append(.malformed("message length \(length) at offset \(offset) of \(bytes.count) bytes"))
                return messages
            }
            let body = bytes[(offset + headerSize)..<(offset + length)]
            messages.append(message(type: type, flags: flags, sequence: sequence, body: body))
            // Messages are 4-byte aligned; the padding after the last may be missing.
            offset = min(offset + align(length), bytes.count)
        }
        if offset < bytes.count, !bytes[offset...].allSatisfy({ $0 == 0 }) {
            messages.append(.malformed("\(bytes.count - offset) bytes after the last message"))
        }
        return messages
    }

    private static func message(type: UInt16, flags: UInt16, sequence: UInt32, body: ArraySlice<UInt8>)
        -> RouteNetlinkMessage
    {
        let start = body.startIndex
        switch type {
        case doneType:
            return .done(sequence: sequence, isInterrupted: flags & dumpInterruptedFlag != 0)
        case errorType:
            guard body.count >= 4 else { return .malformed("an error message of \(body.count) bytes") }
            let code = Int32(bitPattern: readUInt32(body, start))
            return .error(sequence: sequence, code: code)
        case newLinkType, deleteLinkType:
            guard body.count >= linkInfoSize else { return .malformed("a link message of \(body.count) bytes") }
            let index = Int32(bitPattern: readUInt32(body, start + 4))
            let interfaceFlags = readUInt32(body, start + 8)
            return .link(
                RouteNetlinkLink(index: index, flags: interfaceFlags), isRemoved: type == deleteLinkType,
                sequence: sequence)
        case newRouteType, deleteRouteType:
            guard body.count >= routeInfoSize else { return .malformed("a route message of \(body.count) bytes") }
            var route = RouteNetlinkRoute(
                family: body[start], destinationLength: body[start + 1], table: UInt32(body[start + 4]),
                type: body[start + 7], outputInterfaces: [])
            var attributes = body[(start + routeInfoSize)...]
            while attributes.count >= attributeHeaderSize {
                let attributeStart = attributes.startIndex
                let attributeLength = Int(readUInt16(attributes, attributeStart))
                let attributeType = readUInt16(attributes, attributeStart + 2) & 0x3fff
                guard attributeLength >= attributeHeaderSize, attributeLength <= attributes.count else {
                    return .malformed("a route attribute of length \(attributeLength) in \(attributes.count) bytes")
                }
                let payload = attributes[(attributeStart + attributeHeaderSize)..<(attributeStart + attributeLength)]
                switch attributeType {
                case outputInterfaceAttribute where payload.count >= 4:
                    route.outputInterfaces.append(Int32(bitPattern: readUInt32(payload, payload.startIndex)))
                case tableAttribute where payload.count >= 4:
                    route.table = readUInt32(payload, payload.startIndex)
                case multipathAttribute:
                    guard let hops = nextHops(payload) else {
                        return .malformed("a multipath attribute whose next hops overrun it")
                    }
                    route.outputInterfaces += hops
                default:
                    break
                }
                let advance = min(align(attributeLength), attributes.count)
                attributes = attributes.dropFirst(advance)
            }
            return .route(route, isRemoved: type == deleteRouteType, sequence: sequence)
        default:
            return .other(type: type, sequence: sequence)
        }
    }

    /// The interface index of each `struct rtnexthop` in a multipath attribute, or nil when a length lies.
    private static func nextHops(_ payload: ArraySlice<UInt8>) -> [Int32]? {
        var hops: [Int32] = []
        var rest = payload
        while rest.count >= nextHopSize {
            let start = rest.startIndex
            let length = Int(readUInt16(rest, start))
            guard length >= nextHopSize, length <= rest.count else { return nil }
            hops.append(Int32(bitPattern: readUInt32(rest, start + 4)))
            rest = rest.dropFirst(min(align(length), rest.count))
        }
        return hops
    }

    /// `NLMSG_ALIGN`, `RTA_ALIGN`: up to a multiple of 4, saturating instead of overflowing.
    private static func align(_ length: Int) -> Int {
        length > Int.max - 3 ? length : (length + 3) & ~3
    }

    /// A number in the host's byte order (netlink's) at `index` of `bytes`; the caller has checked that it fits.
    private static func readUInt16(_ bytes: ArraySlice<UInt8>, _ index: Int) -> UInt16 {
        var value: UInt16 = 0
        withUnsafeMutableBytes(of: &value) { raw in
            raw[0] = bytes[index]
            raw[1] = bytes[index + 1]
        }
        return value
    }

    private static func readUInt32(_ bytes: ArraySlice<UInt8>, _ index: Int) -> UInt32 {
        var value: UInt32 = 0
        withUnsafeMutableBytes(of: &value) { raw in
            for byte in 0..<4 { raw[byte] = bytes[index + byte] }
        }
        return value
    }
}

/// One message of an rtnetlink datagram, as far as the network condition cares.
public enum RouteNetlinkMessage: Hashable, Sendable {
    /// A link (`RTM_NEWLINK`; `RTM_DELLINK` when `isRemoved`).
    case link(RouteNetlinkLink, isRemoved: Bool, sequence: UInt32)
    /// A route (`RTM_NEWROUTE`; `RTM_DELROUTE` when `isRemoved`).
    case route(RouteNetlinkRoute, isRemoved: Bool, sequence: UInt32)
    /// The end of a dump (`NLMSG_DONE`); `isInterrupted` when the kernel says it changed meanwhile.
    case done(sequence: UInt32, isInterrupted: Bool)
    /// The kernel's answer `NLMSG_ERROR` with a negative errno (0 is an acknowledgement).
    case error(sequence: UInt32, code: Int32)
    /// A message of another type, skipped.
    case other(type: UInt16, sequence: UInt32)
    /// Bytes that are not a message: what was wrong.
    case malformed(String)
}

/// A network interface: its index and its `IFF_*` flags.
public struct RouteNetlinkLink: Hashable, Sendable {
    public var index: Int32
    public var flags: UInt32

    public init(index: Int32, flags: UInt32) {
        self.index = index
        self.flags = flags
    }

    /// Up and running: administratively up (`IFF_UP`) with a carrier (`IFF_RUNNING`), as `ip link` shows `UP` and
    /// no `NO-CARRIER`.
    public var isUp: Bool {
        flags & RouteNetlink.upFlag != 0 && flags & RouteNetlink.runningFlag != 0
    }
}

/// A route: its address family, destination prefix length, table, type and output interfaces (one, or one per next
/// hop of a multipath route).
public struct RouteNetlinkRoute: Hashable, Sendable {
    public var family: UInt8
    public var destinationLength: UInt8
    public var table: UInt32
    public var type: UInt8
    public var outputInterfaces: [Int32]

    public init(family: UInt8, destinationLength: UInt8, table: UInt32, type: UInt8, outputInterfaces: [Int32]) {
        self.family = family
        self.destinationLength = destinationLength
        self.table = table
        self.type = type
        self.outputInterfaces = outputInterfaces
    }

    /// A default route of the main table that forwards (`default dev …` or `default via …`, IPv4 or IPv6).
    public var isDefault: Bool {
        destinationLength == 0 && table == RouteNetlink.mainTable && type == RouteNetlink.unicastRouteType
    }
}

/// What a dump of links and routes says about being online.
public struct NetworkReachability: Hashable, Sendable {
    /// The interfaces by index.
    public var links: [Int32: RouteNetlinkLink]
    /// The routes.
    public var routes: [RouteNetlinkRoute]

    public init(links: [Int32: RouteNetlinkLink] = [:], routes: [RouteNetlinkRoute] = []) {
        self.links = links
        self.routes = routes
    }

    /// The interfaces a default route of the main table leaves through that are up, by index, sorted.
    public var defaultRouteInterfaces: [Int32] {
        var indexes: Set<Int32> = []
        for route in routes where route.isDefault {
            for index in route.outputInterfaces where links[index]?.isUp == true { indexes.insert(index) }
        }
        return indexes.sorted()
    }

    /// Online: a default route in the main table through an interface that is up.
    public var isOnline: Bool { !defaultRouteInterfaces.isEmpty }
}
