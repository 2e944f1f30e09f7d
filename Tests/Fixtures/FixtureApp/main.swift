// A scriptable bgtaskd app for end-to-end tests: commands on stdin, one stdout line per outcome or event.
//
// Usage: BGTaskFixtureApp [--socket PATH] [--lifetime SECONDS]
// Commands: register NAME [background] [exits-on-suspend] | unregister | begin [NAME] | end ID | remaining |
//   ack auto|manual|never|EVENTID | on-expire end|keep | on-terminate exit|stay | lock PATH | unlock |
//   alloc MIB | state | ping | exit CODE
// Output: `ready pid=N` at start; `registered NAME state=S pid=N`, `began ID` (`began invalid` when refused),
//   `ended ID`, `remaining SECONDS|unlimited`, `ack MODE`, `acked EVENTID`, `locked PATH`, `unlocked`,
//   `allocated MIB total=MIB`, `state S`, `pong`; events as `event KIND id=N [tasks=..] [name=.. payload=JSON
//   count=N] [victim=RANK|safe]`; `expired ID` (then `ended ID` unless `on-expire keep`) when an expiration
//   handler runs; `connection lost|failed|reconnected|gave-up|request-failed ...`; failures as `error ...`.
// The process exits by itself after --lifetime seconds (default 60) and when stdin closes, so a test that
// loses track of it cannot leave it running.
import BGTaskClient
import Dispatch
import Glibc

var socketPath: String?
var lifetimeSeconds = 60.0
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
    default:
        Output.line("error usage: BGTaskFixtureApp [--socket PATH] [--lifetime SECONDS]")
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
while let line = readLine() {
    fixture.run(line)
}
Output.line("exiting stdin closed")
exit(0)
