// What the Swift side of `io.bgtask.Lifecycle`'s methods adds to the generated types: the protocol of a call's
// parameters, the empty reply, and which side makes each call.
//
// The parameter and reply structs, the wire types and the `LifecycleMethod` enum with its table of parameter types
// are generated at build time from `io.bgtask.Lifecycle.varlink` and `io.bgtask.Lifecycle.bindings` by the
// `EmbedInterface` plugin. They are plain Codable structs: the codec decodes them from the message's tree, naming a
// wrongly typed parameter (`org.varlink.service.InvalidParameter`), ignoring parameters they do not know, and
// writes every optional field of a reply, as `null` when absent.
import BGTaskJSON

/// A method call's parameters, tied to the method's fully qualified name and its reply type.
///
/// Clients encode a call from the parameters alone (`VarlinkCodec.encodeCall(_:more:oneway:)`) and decode the
/// reply as `Reply`; servers decode the parameters with `VarlinkCodec.decodeParameters(_:from:)`.
public protocol VarlinkMethodCall: Codable, Sendable {
    /// The reply's parameters.
    associatedtype Reply: Codable, Sendable
    /// The fully qualified method name, such as `io.bgtask.Lifecycle.Register`.
    static var methodName: String { get }
}

/// Who may make a call: the app side or the controller side, as `io.bgtask.Lifecycle.varlink` divides its methods.
public enum LifecycleCaller: String, Sendable, CaseIterable {
    /// An app about itself: accepted from the app's own uid and from root.
    case app
    /// A controller: accepted from root, from the app's own uid for its own apps, and from `ControllerGroup`.
    case controller
}

extension LifecycleMethod {
    /// The method of a call whose interface is `io.bgtask.Lifecycle`; nil for other interfaces and unknown names.
    public init?(_ name: VarlinkMethodName) {
        guard name.interface == LifecycleInterface.name else { return nil }
        self.init(rawValue: name.member)
    }

    /// The fully qualified name, `io.bgtask.Lifecycle.<Method>`.
    public var qualifiedName: String { LifecycleInterface.name + "." + rawValue }

    /// Which side makes this call (the interface says it in the comments that open each side's methods).
    public var caller: LifecycleCaller {
        switch self {
        case .register, .beginBackgroundTask, .endBackgroundTask, .backgroundTimeRemaining, .acknowledge,
            .submitRequest, .cancelRequest, .setTaskCompleted:
            .app
        case .listApps, .getApp, .setState, .launch, .terminate, .post, .history, .watch, .getStatus, .listRequests:
            .controller
        }
    }

    /// Whether the method streams its replies and so must be called with `more: true` (else `ExpectedMore`).
    public var requiresMore: Bool {
        switch self {
        case .register, .watch: true
        case .beginBackgroundTask, .endBackgroundTask, .backgroundTimeRemaining, .acknowledge, .listApps, .getApp,
            .setState, .launch, .terminate, .post, .history, .getStatus, .submitRequest, .cancelRequest,
            .listRequests, .setTaskCompleted:
            false
        }
    }
}

/// The reply of a method that returns nothing (`-> ()`): encodes as `{}`.
public struct EmptyReply: Codable, Hashable, Sendable {
    /// The empty reply.
    public init() {}
}
