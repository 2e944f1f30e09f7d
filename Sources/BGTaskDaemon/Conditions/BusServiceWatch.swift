// A service on the system bus whose properties a condition follows (UPower, NetworkManager, logind): whether it is
// on the bus, and its properties, kept current through NameOwnerChanged and PropertiesChanged.

import BGTaskSystem

/// Follows one service's presence and the properties of some of its objects: subscribes to the bus's
/// `NameOwnerChanged` for its name and to `PropertiesChanged` of each object, then asks who owns the name; when
/// someone does, reads each object's properties (`GetAll`), and again when a change invalidates one without its
/// value. Reports each change through `changed`.
final class BusServiceWatch {
    /// Whether the service is on the bus.
    enum Presence: Equatable {
        /// Not known yet: the bus has not answered.
        case asking
        /// Nobody owns the name (or the bus is gone).
        case absent
        /// Someone owns the name; `properties` fill in as the service answers.
        case present
    }

    /// An object of the service, the interface whose properties are read, and the properties kept (the rest of
    /// what the service sends is dropped, so what it can make the daemon hold is bounded).
    struct Object: Hashable {
        var path: BusObjectPath
        var interface: String
        var properties: Set<String>
    }

    /// The service's well-known name, e.g. `org.freedesktop.UPower`.
    let name: String
    let objects: [Object]
    private let logger: Logger
    private let changed: () -> Void
    private weak var bus: SystemBus?
    private var matches: [BusMatch] = []
    private(set) var presence = Presence.asking
    /// Each object's properties, once read (and kept current); empty while absent.
    private(set) var properties: [BusObjectPath: [String: BusValue]] = [:]
    /// Bumped whenever the service goes or comes, so that a late answer from an earlier owner is dropped.
    private var generation = 0
    /// Objects whose properties could not be read from the present owner: it answered, with an error.
    private var unreadable: Set<BusObjectPath> = []

    init(name: String, objects: [Object], logger: Logger, changed: @escaping () -> Void) {
        self.name = name
        self.objects = objects
        self.logger = logger
        self.changed = changed
    }

    /// Every object's properties have been read: the values can be used.
    var isReady: Bool { presence == .present && objects.allSatisfy { properties[$0.path] != nil } }

    /// Whether the service has answered all it was asked: absent, or present with each object read or refused.
    var hasAnswered: Bool {
        switch presence {
        case .asking: false
        case .absent: true
        case .present: objects.allSatisfy { properties[$0.path] != nil || unreadable.contains($0.path) }
        }
    }

    /// A property of an object, once read.
    func property(_ name: String, of path: BusObjectPath) -> BusValue? { properties[path]?[name] }

    /// Subscribes and asks; the answers arrive on the loop.
    func start(on bus: SystemBus) {
        self.bus = bus
        let report: (ServiceManagerError) -> Void = { [logger, name] error in
            logger.warning("system bus, \(name): \(error)")
        }
        do {
            let ownerRule =
                "type='signal',sender='org.freedesktop.DBus',path='/org/freedesktop/DBus',"
                + "interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='\(name)'"
            matches.append(
                try bus.addMatch(ownerRule, onError: report) { [weak self] (reader) throws(ServiceManagerError) in
                    let changedName = try reader.readString()
                    _ = try reader.readString()
                    let newOwner = try reader.readString()
                    guard let self, changedName == self.name else { return }
                    self.ownerChanged(isOwned: !newOwner.isEmpty)
                })
            for object in objects {
                let rule =
                    "type='signal',sender='\(name)',path='\(object.path.rawValue)',"
                    + "interface='org.freedesktop.DBus.Properties',member='PropertiesChanged'"
                matches.append(
                    try bus.addMatch(rule, onError: report) { [weak self] (reader) throws(ServiceManagerError) in
                        let interface = try reader.readString()
                        let changedValues = try reader.readProperties()
                        let invalidated = try reader.readStringArray()
                        self?.propertiesChanged(object, interface: interface, changedValues, invalidated: invalidated)
                    })
            }
        } catch {
            logger.warning("system bus: cannot follow \(name): \(error)")
            presence = .absent
            return
        }
        let asked = generation
        bus.call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            member: "GetNameOwner", arguments: [.string(name)],
            read: { (reader) throws(ServiceManagerError) in try reader.readString() }
        ) { [weak self] result in
            guard let self, asked == self.generation, self.presence == .asking else { return }
            switch result {
            case .success: self.ownerChanged(isOwned: true)
            case .failure: self.ownerChanged(isOwned: false)
            }
        }
    }

    /// The bus is gone: the service with it.
    func busLost() {
        for match in matches { match.cancel() }
        matches = []
        ownerChanged(isOwned: false)
    }

    private func ownerChanged(isOwned: Bool) {
        generation += 1
        properties = [:]
        unreadable = []
        presence = isOwned ? .present : .absent
        changed()
        if isOwned { readAll() }
    }

    /// Reads every object's properties.
    private func readAll() {
        for object in objects { read(object) }
    }

    private func read(_ object: Object) {
        guard let bus else { return }
        let asked = generation
        bus.allProperties(destination: name, path: object.path, interface: object.interface) {
            [weak self] result in
            guard let self, asked == self.generation else { return }
            switch result {
            case .success(let values):
                self.unreadable.remove(object.path)
                self.properties[object.path] = values.filter { object.properties.contains($0.key) }
                self.changed()
            case .failure(let error):
                // The service is there but did not answer (or has no such object): its condition has no source
                // until the service changes or comes back, rather than a value it does not have.
                self.logger.warning("system bus: cannot read \(self.name) \(object.path): \(error)")
                self.unreadable.insert(object.path)
                self.changed()
            }
        }
    }

    private func propertiesChanged(
        _ object: Object, interface: String, _ values: [String: BusValue], invalidated: [String]
    ) {
        guard interface == object.interface, presence == .present, properties[object.path] != nil else { return }
        properties[object.path, default: [:]].merge(values.filter { object.properties.contains($0.key) }) { $1 }
        if !invalidated.isEmpty {
            read(object)
        } else if !values.isEmpty {
            changed()
        }
    }
}
