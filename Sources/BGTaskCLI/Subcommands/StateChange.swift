// The shared run method of `foreground`, `background` and `deactivate`: one `SetState` call and its output.
import BGTaskArguments
import BGTaskClient

/// Moves `app` to `state` and prints the app's new state (or the `SetState` reply with `json`).
func changeState(of app: String, to state: AppState, json: Bool, in context: CommandContext) throws(CommandFailure)
    -> ExitCode
{
    let client = try context.connect()
    defer { client.close() }
    let info = try context.call { () throws(ClientError) in try client.setState(app, to: state) }
    context.standardOutput.write(json ? try Rendering.json(SetStateReply(app: info)) : Rendering.stateLine(info))
    return .success
}
