// External power and the battery from the kernel's power_supply class, re-read when the kernel's uevents (on sysfs)
// or inotify (on any other directory, such as a test's tree) say a supply changed.

import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// What the power_supply class says at one moment.
struct PowerSupplyReading: Equatable {
    var isOnExternalPower: Bool
    var isBatteryNotLow: Bool
    /// The supplies in a few words, for the log.
    var summary: String
}

/// Follows a power_supply directory: reads it at start and again after every change the kernel reports, never on a
/// timer. On sysfs the kernel announces changes as uevents of the `power_supply` subsystem (sysfs files never tell
/// inotify about a new value); any other directory is watched with inotify, on itself (supplies appearing and going)
/// and on each supply (a file written and closed, or renamed into place).
final class PowerSupplyWatch {
    /// How changes are seen.
    enum Mechanism: Equatable, CustomStringConvertible {
        /// `NETLINK_KOBJECT_UEVENT`, the kernel's group.
        case uevents
        /// inotify on the directory and its supplies.
        case inotify
        /// Nothing could be armed: the reading at start stands.
        case none(String)

        var description: String {
            switch self {
            case .uevents: "uevents"
            case .inotify: "inotify"
            case .none(let why): "no change events: \(why)"
            }
        }
    }

    let supplyClass: PowerSupplyClass
    private let lowPercent: Int
    private let logger: Logger
    private let loop: EventLoop
    private let changed: () -> Void
    /// The last reading; nil when the directory cannot be read (then this source serves no condition).
    private(set) var reading: PowerSupplyReading?
    /// Why the directory could not be read, while it cannot.
    private(set) var readFailure: String?
    private(set) var mechanism: Mechanism = .none("not started")
    private var ueventSocket: NetlinkSocket?
    private var inotify: FileDescriptor?
    private var source: IOSource?
    /// The inotify watch of each supply directory, by name (the directory's own is `rootWatch`).
    private var supplyWatches: [String: Int32] = [:]
    private var rootWatch: Int32?
    /// Whether the cut at `PowerSupplyClass.supplyLimit` was logged.
    private var hasReportedCut = false

    /// What a watched supply's change is: a file written and closed, or renamed in or out, or removed; never the
    /// mere `IN_MODIFY`, which a rewrite sends after truncating and before writing (a read then sees an empty file).
    private static let supplyEvents = UInt32(IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE)
    /// What changes the directory: a supply appearing or going.
    private static let rootEvents = UInt32(IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_ONLYDIR)

    init(path: String, lowPercent: Int, logger: Logger, loop: EventLoop, changed: @escaping () -> Void) {
        supplyClass = PowerSupplyClass(path: path)
        self.lowPercent = lowPercent
        self.logger = logger
        self.loop = loop
        self.changed = changed
    }

    deinit { stop() }

    /// Arms the change events, then reads the supplies (in that order, so no change falls between).
    func start() {
        if supplyClass.isSysfs {
            do {
                // 8 KiB: the kernel's uevent buffer (`UEVENT_BUFFER_SIZE`, 2 KiB) with room to spare. A 1 MiB
                // receive buffer holds the burst of a whole host's devices changing at once (udev asks for 128 MiB
                // because it must see every event; here a lost burst only costs one more read of the supplies).
                let socket = try NetlinkSocket(
                    protocolNumber: NetlinkSocket.ueventProtocol, groups: NetlinkSocket.kernelUeventGroup,
                    receiveBufferBytes: 1 << 20, datagramBytes: 8 << 10)
                source = try loop.addIO(fd: socket.fileDescriptor, events: .readable, name: "power-uevents") {
                    [weak self] _, _ in self?.ueventsReadable()
                }
                ueventSocket = socket
                mechanism = .uevents
            } catch {
                mechanism = .none("cannot listen to the kernel's uevents: \(error)")
            }
        } else {
            do {
                let descriptor = FileDescriptor(
                    rawValue: try systemCall("inotify_init1") { inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC)) })
                inotify = descriptor
                rootWatch = try systemCall("inotify_add_watch(\(supplyClass.path))") {
                    inotify_add_watch(descriptor.rawValue, supplyClass.path, Self.rootEvents)
                }
                source = try loop.addIO(fd: descriptor, events: .readable, name: "power-inotify") {
                    [weak self] _, _ in self?.inotifyReadable()
                }
                mechanism = .inotify
            } catch {
                if let inotify { try? inotify.close() }
                inotify = nil
                rootWatch = nil
                mechanism = .none("cannot watch \(supplyClass.path): \(error)")
            }
        }
        reread()
    }

    /// Cancels the change events.
    func stop() {
        source?.cancel()
        source = nil
        ueventSocket = nil
        if let inotify { try? inotify.close() }
        inotify = nil
        supplyWatches = [:]
        rootWatch = nil
    }

    /// Reads the supplies again and reports a changed reading.
    private func reread() {
        let previous = reading
        do {
            // Each supply is watched before it is read, so a change between the two is not missed.
            if inotify != nil { watchSupplies(try supplyClass.supplyNames().names) }
            let (snapshot, isCut) = try supplyClass.read()
            if isCut && !hasReportedCut {
                hasReportedCut = true
                logger.warning(
                    "\(supplyClass.path) has more than \(PowerSupplyClass.supplyLimit) supplies; reading the first")
            }
            readFailure = nil
            reading = PowerSupplyReading(
                isOnExternalPower: snapshot.isOnExternalPower,
                isBatteryNotLow: snapshot.isBatteryNotLow(lowPercent: lowPercent), summary: snapshot.summary)
        } catch {
            readFailure = "\(error)"
            reading = nil
        }
        if reading != previous { changed() }
    }

    /// Adds an inotify watch on each supply not watched yet (a removed one's watch goes by itself).
    private func watchSupplies(_ names: [String]) {
        guard let inotify else { return }
        for name in names where supplyWatches[name] == nil {
            let path = supplyClass.path + "/" + name
            let watch = inotify_add_watch(inotify.rawValue, path, Self.supplyEvents)
            if watch >= 0 { supplyWatches[name] = watch }
        }
        let current = Set(names)
        for name in supplyWatches.keys where !current.contains(name) { supplyWatches[name] = nil }
    }

    /// Drains the uevent socket; re-reads once if any came from the kernel about a power supply, or if uevents were
    /// lost (`ENOBUFS`).
    private func ueventsReadable() {
        guard let ueventSocket else { return }
        var isRelevant = false
        while true {
            do {
                guard let datagram = try ueventSocket.receive() else { break }
                // Only the kernel (port 0) speaks on its group; anything else is ignored.
                guard datagram.senderPort == 0, !datagram.isTruncated,
                    let event = KernelUevent.parse(datagram.bytes), event.subsystem == "power_supply"
                else { continue }
                isRelevant = true
            } catch  where error.rawValue == ENOBUFS {
                isRelevant = true
            } catch {
                logger.warning("power supply uevents: \(error); no longer following changes")
                source?.cancel()
                source = nil
                mechanism = .none("\(error)")
                break
            }
        }
        if isRelevant { reread() }
    }

    /// Drains inotify and re-reads once.
    private func inotifyReadable() {
        guard let inotify else { return }
        var buffer = [UInt8](repeating: 0, count: 4096)
        var sawEvent = false
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(inotify.rawValue, $0.baseAddress, $0.count) }
            if count > 0 {
                sawEvent = true
                continue
            }
            if count < 0 && errno == EINTR { continue }
            if count < 0 && errno != EAGAIN {
                logger.warning("inotify on \(supplyClass.path): \(Errno(rawValue: errno)); no longer following changes")
                source?.cancel()
                source = nil
                mechanism = .none("inotify failed")
            }
            break
        }
        if sawEvent { reread() }
    }
}
