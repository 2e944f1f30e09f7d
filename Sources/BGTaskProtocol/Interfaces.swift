// The names and description texts of the two interfaces bgtaskd serves, as `GetInterfaceDescription` returns them.

/// Namespace for the interface texts the `EmbedInterface` build plugin generates from the `.varlink` files.
///
/// The plugin adds one `static let` per `.varlink` file of this target; the files are the source of truth and
/// the constants equal them byte for byte.
enum EmbeddedInterfaceText {}

/// The `io.bgtask.Lifecycle` interface: apps, leases, events and the controller calls.
public enum LifecycleInterface {
    /// The interface name, the prefix of every method and error name of the interface.
    public static let name = "io.bgtask.Lifecycle"

    /// The interface description in Varlink IDL, exactly the text of `io.bgtask.Lifecycle.varlink`.
    public static let description: String = EmbeddedInterfaceText.ioBgtaskLifecycle
}

/// The standard `org.varlink.service` interface every Varlink service implements.
public enum VarlinkServiceInterface {
    /// The interface name.
    public static let name = "org.varlink.service"

    /// The interface description in Varlink IDL, exactly the text of `org.varlink.service.varlink`.
    public static let description: String = EmbeddedInterfaceText.orgVarlinkService
}
