// Reaching the daemon from a subcommand: the socket the global options name, and client errors as one-line failures.
import BGTaskArguments
import BGTaskClient

extension CommandContext {
    /// The daemon's socket path, as every client of bgtaskd finds it (`DaemonSocket`): `--socket`, else
    /// `$BGTASK_SOCKET`, else the per-user daemon's with `--user`, else the system daemon's.
    public func socketPath() throws(CommandFailure) -> String {
        do {
            return try DaemonSocket.path(explicit: globals.socketPath, user: globals.isUser, environment: environment)
        } catch {
            throw failure(error)
        }
    }

    /// A client connected to the daemon; a daemon that is not running fails with how to start it.
    public func connect() throws(CommandFailure) -> LifecycleClient {
        let path = try socketPath()
        do {
            return try LifecycleClient(socketPath: path)
        } catch {
            throw failure(error)
        }
    }

    /// Runs one call to the daemon, turning its error into a one-line failure.
    public func call<Value>(_ body: () throws(ClientError) -> Value) throws(CommandFailure) -> Value {
        do {
            return try body()
        } catch {
            throw failure(error)
        }
    }

    /// Makes one call on a connection of its own, closed afterwards: what most subcommands do.
    public func callOnce<Value>(_ body: (LifecycleClient) throws(ClientError) -> Value) throws(CommandFailure)
        -> Value
    {
        let client = try connect()
        defer { client.close() }
        return try call { () throws(ClientError) in try body(client) }
    }

    /// Prints a reply: as its wire JSON with `--json` (`json`), else as `text` renders it.
    public func print<Reply: Encodable>(_ reply: Reply, json: Bool, text: (Reply) -> String) throws(CommandFailure) {
        standardOutput.write(json ? try Rendering.json(reply) : text(reply))
    }
}

/// A client error as a failure line: the client library's description, plus what to do where bgtask can say.
public func failure(_ error: ClientError) -> CommandFailure {
    switch error {
    case .lifecycle(.noSuchApp):
        return CommandFailure("\(error); 'bgtask apps --all' lists the apps the daemon knows")
    case .lifecycle(.noSuchTask(let app, _)):
        return CommandFailure("\(error); 'bgtask status \(app)' lists its open tasks")
    case .lifecycle(.backgroundTimeExhausted(let app)):
        return CommandFailure(
            "\(error); it gets a fresh budget once it returns to the foreground "
                + "('bgtask foreground \(app)')")
    case .timedOut:
        return CommandFailure("\(error); it may be overloaded or stopped ('systemctl status bgtaskd')")
    default:
        return CommandFailure(error.description)
    }
}
