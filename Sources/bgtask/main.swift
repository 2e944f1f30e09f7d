// bgtask: the command-line front end of bgtaskd; everything but the wiring lives in BGTaskCLI and BGTaskDemo.
import BGTaskCLI
import BGTaskDemo
import Glibc

let status = await BGTaskTool.main(Array(CommandLine.arguments.dropFirst()), demoRunner: LifecycleDemo())
exit(status.rawValue)
