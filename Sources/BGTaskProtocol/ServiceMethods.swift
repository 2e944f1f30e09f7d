// What the Swift side of the standard `org.varlink.service` interface adds to the types generated from
// `org.varlink.service.varlink` (`VarlinkServiceMethod`, the parameter and reply structs): the method of a call, and
// the replies bgtaskd gives.

extension VarlinkServiceMethod {
    /// The method of a call whose interface is `org.varlink.service`; nil for other interfaces and unknown names.
    public init?(_ name: VarlinkMethodName) {
        guard name.interface == VarlinkServiceInterface.name else { return nil }
        self.init(rawValue: name.member)
    }

    /// The fully qualified name, `org.varlink.service.<Method>`.
    public var qualifiedName: String { VarlinkServiceInterface.name + "." + rawValue }
}

extension GetInfoReply {
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

extension GetInterfaceDescriptionReply {
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
