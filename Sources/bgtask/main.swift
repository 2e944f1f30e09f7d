// bgtask: the command-line front end of bgtaskd; everything but the wiring lives in BGTaskCLI.
import BGTaskCLI
import Glibc

let status = await BGTaskTool.main(Array(CommandLine.arguments.dropFirst()))
exit(status.rawValue)
