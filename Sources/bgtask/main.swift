// bgtask: the command-line front end of bgtaskd; everything but the wiring lives in BGTaskCLI.
import BGTaskCLI
import Glibc

// The demo's implementation plugs in here as `demoRunner:` (see `DemoRunner`); without one, `bgtask demo` fails
// with one line saying this build does not include it.
let status = await BGTaskTool.main(Array(CommandLine.arguments.dropFirst()))
exit(status.rawValue)
