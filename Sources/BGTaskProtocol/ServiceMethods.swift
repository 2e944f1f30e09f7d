// The methods of the standard `org.varlink.service` interface and the `GetInfo` reply bgtaskd gives.

/// The methods of `org.varlink.service`; the raw value is the method's name within the interface.
public enum VarlinkServiceMethod: String, CaseIterable, Sendable {
    /// Describes the service: vendor, product, version, URL and the interfaces served.
    case getInfo = "GetInfo"
    /// Returns the IDL text of one served interface.
    case getInterfaceDescription = "GetInterfaceDescription"

    /// The method of a call whose interface is `org.varlink.service`; nil for other interfaces and unknown names.
    public init?(_ name: VarlinkMethodName) {
        guard name.interface == VarlinkServiceInterface.name else { return nil }
        self.init(rawValue: name.member)
    }

    /// The fully qualified name, `org.varlink.service.<Method>`.
    public var qualifiedName: String { VarlinkServiceInterface.name + "." + rawValue }
}

/// Parameters of `org.varlink.service.GetInfo`: none.
public struct GetInfoParameters: VarlinkMethodCall, Hashable {
    public typealias Reply = GetInfoReply
    public static let methodName = VarlinkServiceMethod.getInfo.qualifiedName

    /// The call has no parameters.
    public init() {}
}

/// The reply of `org.varlink.service.GetInfo`: who implements the service and which interfaces it serves.
public struct GetInfoReply: Codable, Hashable, Sendable {
    /// The vendor of the service.
    public var vendor: String
    /// The product implementing the service.
    public var product: String
    /// The product's version.
    public var version: String
    /// A web page about the product.
    public var url: String
    /// The fully qualified names of the interfaces served.
    public var interfaces: [String]

    /// A reply with every field given.
    public init(vendor: String, product: String, version: String, url: String, interfaces: [String]) {
        self.vendor = vendor
        self.product = product
        self.version = version
        self.url = url
        self.interfaces = interfaces
    }

    /// The project's home page, the default `url` of bgtaskd's reply.
    public static let projectURL = "https://github.com/bgtask/bgtaskd"

    /// bgtaskd's reply: vendor "bgtask project", product "bgtaskd", and by default both interfaces it serves.
    public static func bgtaskd(
        version: String,
        url: String = projectURL,
        interfaces: [String] = [VarlinkServiceInterface.name, LifecycleInterface.name]
    ) -> GetInfoReply {
        GetInfoReply(vendor: "bgtask project", product: "bgtaskd", version: version, url: url, interfaces: interfaces)
    }
}

/// Parameters of `org.varlink.service.GetInterfaceDescription`.
public struct GetInterfaceDescriptionParameters: VarlinkMethodCall, Hashable {
    public typealias Reply = GetInterfaceDescriptionReply
    public static let methodName = VarlinkServiceMethod.getInterfaceDescription.qualifiedName

    /// The fully qualified name of the interface to describe.
    public var interface: String

    /// Parameters naming the interface.
    public init(interface: String) {
        self.interface = interface
    }

}

/// The reply of `org.varlink.service.GetInterfaceDescription`.
public struct GetInterfaceDescriptionReply: Codable, Hashable, Sendable {
    /// The interface in Varlink IDL.
    public var description: String

    /// A reply carrying an interface description.
    public init(description: String) {
        self.description = description
    }

    /// The reply for `interface`, from the texts bgtaskd embeds; nil for an interface bgtaskd does not serve.
    public static func bgtaskd(interface: String) -> GetInterfaceDescriptionReply? {
        switch interface {
        case LifecycleInterface.name: GetInterfaceDescriptionReply(description: LifecycleInterface.description)
        case VarlinkServiceInterface.name:
            GetInterfaceDescriptionReply(description: VarlinkServiceInterface.description)
        default: nil
        }
    }
}
