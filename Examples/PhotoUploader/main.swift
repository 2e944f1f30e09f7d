// PhotoUploader: an example app that finishes an upload in background under a bgtaskd background task.
//
// README
// ------
// On iOS, an app that must finish an upload after the user leaves it wraps the work in
// `UIApplication.beginBackgroundTask(withName:expirationHandler:)` and calls `endBackgroundTask(_:)` when done;
// if background time runs out first, the expiration handler cancels the work and ends the task. This program
// does exactly that on Linux with `BackgroundApplication` from BGTaskClient:
//
//   1. It registers with bgtaskd as `photo-uploader` and sets itself as the application's delegate.
//   2. It begins a background task named "upload" and uploads the photos in chunks on a background queue,
//      printing after each chunk the app's state and `backgroundTimeRemaining` (unlimited in the foreground).
//   3. When a controller (a device shell, `bgtask`) sends it to background with `SetState`, the delegate prints
//      it, and the daemon lets the upload continue because the task holds a lease.
//   4. If the background time is about to run out, the expiration handler cancels the upload and ends the task;
//      the program then exits with the upload incomplete.
//   5. When the upload is done it calls `endBackgroundTask(_:)`, closes the registration and exits. In background,
//      ending the task lets the daemon suspend the app at once, as iOS does; it then exits when next resumed.
//   6. On `willTerminate` it cancels the upload and exits at once.
//
// Try it:
//   bgtaskd --socket "$PWD/bgtask.sock" &
//   PhotoUploader --socket "$PWD/bgtask.sock" --photos 20 --chunk-ms 250 [--deadline 120] &
//   python3 -m varlink.cli call "unix:$PWD/bgtask.sock/io.bgtask.Lifecycle.SetState" \
//       '{"app": "photo-uploader", "state": "background"}'
// and watch it print its remaining background time while it finishes the upload.
import BGTaskClient
import Dispatch
import Foundation
import Synchronization

/// Prints a line at once, also when stdout is a pipe (`print` would buffer it).
func say(_ text: String) {
    FileHandle.standardOutput.write(Data((text + "\n").utf8))
}

/// Seconds for display; the foreground's unlimited time reads as such.
func describe(_ seconds: TimeInterval) -> String {
    seconds == .greatestFiniteMagnitude ? "unlimited" : String(Int(seconds.rounded(.down))) + " s"
}

/// Uploads photos in chunks, under a background task so the work survives a move to background.
final class PhotoUpload: Sendable {
    let photoCount: Int
    let chunkInterval: TimeInterval
    private let state = Mutex(State())

    private struct State {
        var taskID = BackgroundTaskIdentifier.invalid
        var isCancelled = false
    }

    init(photoCount: Int, chunkInterval: TimeInterval) {
        self.photoCount = photoCount
        self.chunkInterval = chunkInterval
    }

    func start(in application: BackgroundApplication) {
        let taskID = application.beginBackgroundTask(withName: "upload") { [self] in
            say("background time is running out: cancelling the upload")
            cancel()
            // End the task before finishing: the call must reach the daemon before the process exits.
            endTask(in: application)
            finish(application)
        }
        guard taskID != .invalid else {
            say("no background time left: not starting the upload")
            return finish(application)
        }
        state.withLock { $0.taskID = taskID }
        say("upload started: \(photoCount) photos, background task \(taskID)")
        DispatchQueue.global().async { [self] in
            upload(in: application)
        }
    }

    func cancel() {
        state.withLock { $0.isCancelled = true }
    }

    private var isCancelled: Bool { state.withLock { $0.isCancelled } }

    private func upload(in application: BackgroundApplication) {
        for photo in 1...photoCount {
            guard !isCancelled else {
                // Whoever cancelled (the expiration handler, willTerminate) ends the task and the process.
                say("upload cancelled after \(photo - 1) of \(photoCount) photos")
                return
            }
            // Stands in for sending one photo over the network.
            Thread.sleep(forTimeInterval: chunkInterval)
            say(
                "uploaded photo \(photo)/\(photoCount), state \(application.applicationState), "
                    + "backgroundTimeRemaining \(describe(application.backgroundTimeRemaining))")
        }
        say("upload finished")
        endTask(in: application)
        finish(application)
    }

    /// Ends the background task once, whichever of completion and expiry comes first.
    private func endTask(in application: BackgroundApplication) {
        let taskID = state.withLock { state in
            defer { state.taskID = .invalid }
            return state.taskID
        }
        guard taskID != .invalid else { return }
        application.endBackgroundTask(taskID)
        say("ended background task \(taskID)")
    }

    private func finish(_ application: BackgroundApplication) {
        DispatchQueue.main.async {
            application.close()
            say("done")
            exit(0)
        }
    }
}

/// The lifecycle callbacks, on the main queue as with UIKit.
final class UploaderDelegate: ApplicationDelegate {
    let upload: PhotoUpload

    init(upload: PhotoUpload) {
        self.upload = upload
    }

    func applicationDidEnterBackground(_ application: BackgroundApplication) {
        say("entered background, \(describe(application.backgroundTimeRemaining)) of background time left")
    }

    func applicationWillEnterForeground(_ application: BackgroundApplication) {
        say("returning to the foreground")
    }

    func applicationDidBecomeActive(_ application: BackgroundApplication) {
        say("active")
    }

    func applicationWillTerminate(_ application: BackgroundApplication) {
        say("terminating: cancelling the upload")
        upload.cancel()
        exit(0)
    }
}

// MARK: - Main

var socketPath: String?
var photoCount = 10
var chunkMilliseconds = 300
var deadlineSeconds: Int?
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch (argument, arguments.popFirst()) {
    case ("--socket", let path?): socketPath = path
    case ("--photos", let count?) where Int(count).map({ $0 > 0 }) == true: photoCount = Int(count) ?? photoCount
    case ("--chunk-ms", let milliseconds?) where Int(milliseconds).map({ $0 >= 0 }) == true:
        chunkMilliseconds = Int(milliseconds) ?? chunkMilliseconds
    case ("--deadline", let seconds?) where Int(seconds).map({ $0 > 0 }) == true:
        deadlineSeconds = Int(seconds)
    default:
        say("usage: PhotoUploader [--socket PATH] [--photos N] [--chunk-ms MILLISECONDS] [--deadline SECONDS]")
        exit(64)
    }
}

// A script running the uploader can bound how long it may take, suspensions included.
if let deadlineSeconds {
    DispatchQueue.main.asyncAfter(deadline: .now() + .seconds(deadlineSeconds)) {
        say("deadline of \(deadlineSeconds) s reached: giving up")
        exit(2)
    }
}

let upload = PhotoUpload(photoCount: photoCount, chunkInterval: Double(chunkMilliseconds) / 1000)
let delegate = UploaderDelegate(upload: upload)
let application: BackgroundApplication
do {
    // Callbacks on the main queue, as UIKit delivers them; `dispatchMain()` below runs it.
    application = try BackgroundApplication(
        name: "photo-uploader", socketPath: socketPath, delegate: delegate, callbackQueue: .main)
} catch {
    say("cannot register: \(error)")
    exit(1)
}
say("registered as \(application.name), state \(application.applicationState)")
upload.start(in: application)
dispatchMain()
