// bgtask-demo-app: the sample app `bgtask demo` runs; everything but the wiring lives in BGTaskDemoApp.
import BGTaskDemoApp

SampleApp.main(Array(CommandLine.arguments.dropFirst()))
