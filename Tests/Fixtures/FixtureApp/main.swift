// A scriptable bgtaskd app for end-to-end tests: commands on stdin, one stdout line per outcome or event.
//
// Usage: BGTaskFixtureApp [--socket PATH] [--lifetime SECONDS] [--run COMMAND]... [--stay]
//   --run COMMAND runs COMMAND at start, in order, exactly as if read from stdin (for a launched app, whose stdin
//   is /dev/null); --stay keeps the process running once stdin closes, until --lifetime ends it.
// Commands: register NAME [background] [exits-on-suspend] | unregister | begin [NAME] | end ID | remaining |
//   handle IDENTIFIER | ack auto|manual|never|EVENTID | on-expire end|keep | on-terminate exit|stay |
//   on-warning free|keep | lock PATH | unlock | alloc MIB | state | ping | exit CODE
// Output: `ready pid=N` at start; `registered NAME state=S pid=N`, `began ID` (`began invalid` when refused),
//   `ended ID`, `remaining SECONDS|unlimited`, `handling IDENTIFIER`, `ack MODE`, `acked EVENTID`, `on-warning
//   MODE`, `locked PATH`, `unlocked`, `allocated MIB total=MIB`, `state S`, `pong`; events as `event KIND id=N
//   [tasks=..] [name=.. payload=JSON count=N] [victim=RANK|safe]`; `freed MIB` after a memoryWarning with
//   `on-warning free` (every allocation unmapped); `expired ID` (then `ended ID` unless `on-expire keep`) when an
//   expiration handler runs; `launched IDENTIFIER task=ID` when a scheduled task's launch handler runs, and
//   `scheduled-expired ID` when its expiration handler does (the task is left running); `connection
//   lost|failed|reconnected|gave-up|request-failed ...`; `exiting stdin closed` or, with --stay, `staying stdin
//   closed`; failures as `error ...`.
// The process exits by itself after --lifetime seconds (default 60) and, without --stay, when stdin closes, so a
// test that loses track of it cannot leave it running.
import BGTaskClient
import Dispatch
import Glibc

let usage = "error usage: BGTaskFixtureApp [--socket PATH] [--lifetime SECONDS] [--run COMMAND]... [--stay]"
var socketPath: String?
var lifetimeSeconds = 60.0
var startCommands: [String] = []
var staysAfterStandardInput = false
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--socket":
        socketPath = arguments.popFirst()
    case "--lifetime":
        guard let value = arguments.popFirst().flatMap(Double.init), value > 0 else {
            Output.line("error usage: --lifetime SECONDS")
            exit(64)
        }
        lifetimeSeconds = value
    case "--run":
        guard let command = arguments.popFirst() else {
            Output.line("error usage: --run COMMAND")
            exit(64)
        }
        startCommands.append(command)
    case "--stay":
        staysAfterStandardInput = true
    default:
        Output.line(usage)
        exit(64)
    }
}

let lifetime = lifetimeSeconds
DispatchQueue.global().asyncAfter(deadline: .now() + lifetime) {
    Output.line("error lifetime of \(lifetime) s exceeded")
    exit(3)
}

let fixture = Fixture(socketPath: socketPath)
Output.line("ready pid=\(getpid())")
for command in startCommands {
    fixture.run(command)
}
while let line = readLine() {
    fixture.run(line)
}
guard staysAfterStandardInput else {
    Output.line("exiting stdin closed")
    exit(0)
}
Output.line("staying stdin closed")
// Events and the lifetime bound run on other queues; this thread has nothing left to do.
dispatchMain()
