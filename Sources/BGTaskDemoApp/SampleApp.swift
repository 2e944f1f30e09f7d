// The sample app of `bgtask demo`: a BackgroundApplication written the way an iOS developer writes a UIApplication.
import BGTaskClient
import BGTaskJSON
import Dispatch
import Foundation
import Glibc

/// `bgtask-demo-app`: registers with bgtaskd, runs its delegate's callbacks on the main queue, and prints one line
/// per thing it experiences, so `bgtask demo` can quote it.
///
/// Every event is printed as `event KIND id=N` with its details (`taskIds=[..]`, `name=.. count=N payload=..`,
/// `likelyVictim=.. rank=N`); what the app does about it (a task begun or ended, an expiration handler run, the
/// remaining background time it reads) is printed in words. The process exits by itself after its lifetime, and
/// when it loses the daemon for good.
public enum SampleApp {
    /// Runs the app with `arguments` (without the program name); never returns.
    public static func main(_ arguments: [String]) -> Never {
        let options: SampleAppOptions
        do {
            options = try SampleAppOptions.parse(arguments)
        } catch {
            AppOutput.error("bgtask-demo-app: \(error)\n\(SampleAppOptions.usage)")
            exit(64)
        }
        let lifetime = options.lifetime
        DispatchQueue.global().asyncAfter(deadline: .now() + lifetime.timeInterval) {
            AppOutput.line("lifetime of \(AppOutput.seconds(lifetime.timeInterval)) is over: exiting")
            exit(0)
        }
        let delegate = SampleAppDelegate(options: options)
        let applicationOptions = BackgroundApplication.Options(
            // A demo app follows its private daemon: a few attempts cover a hiccup, then it exits with it.
            reconnect: ReconnectPolicy(maximumAttempts: 3),
            eventObserver: { event in AppOutput.line(AppOutput.describe(event)) },
            connectionObserver: { change in
                AppOutput.line("connection \(change)")
                if case .gaveUp = change { exit(0) }
            })
        let application: BackgroundApplication
        do {
            application = try BackgroundApplication(
                name: options.name, socketPath: options.socketPath, delegate: delegate, callbackQueue: .main,
                options: applicationOptions)
        } catch {
            AppOutput.error("bgtask-demo-app: cannot register as \(options.name): \(error)")
            exit(1)
        }
        // Events wait on the main queue until dispatchMain runs it, so this line comes before any event's.
        AppOutput.line("registered pid=\(getpid()) state=\(application.registeredApp.state.rawValue)")
        if let identifier = options.scheduledIdentifier { scheduleBackup(identifier, in: application) }
        // The application must live as long as the process: the delegate is held weakly, as UIKit holds it.
        withExtendedLifetime((application, delegate)) {
            dispatchMain()
        }
    }
}

/// The scheduled work of `--scheduled ID`, written as an iOS app writes a `BGProcessingTask`: a launch handler
/// registered before the request is submitted; the task works until its expiration handler says to stop, and then
/// completes as failed, to be retried.
private func scheduleBackup(_ identifier: String, in application: BackgroundApplication) {
    application.register(forTaskWithIdentifier: identifier) { task in
        AppOutput.line("scheduled task \(task.identifier) began (task \(task.taskId)): backing up until told to stop")
        task.expirationHandler = {
            AppOutput.line(
                "expiration handler of scheduled task \(task.identifier) ran: stopping, "
                    + "setTaskCompleted(success: false, retry: true)")
            task.setTaskCompleted(success: false, retry: true)
        }
    }
    var request = BackgroundTaskRequest.processing(identifier: identifier)
    request.requiresExternalPower = true
    do {
        let held = try application.submit(request)
        let waiting = held.waitingOn.map {
            $0.isEmpty ? "" : ", waiting on " + $0.map(\.rawValue).joined(separator: ",")
        }
        AppOutput.line("submitted \(identifier) (processing, requires ac): \(held.state.rawValue)\(waiting ?? "")")
    } catch {
        AppOutput.line("cannot submit \(identifier): \(error)")
    }
}

/// Lines on standard output, written at once with one `write(2)` each (shorter than `PIPE_BUF`, so lines from
/// different threads never mix), and the formats the demo quotes.
enum AppOutput {
    /// Writes `text` and a newline to standard output.
    static func line(_ text: String) {
        write(text + "\n", to: 1)
    }

    /// Writes `text` and a newline to standard error.
    static func error(_ text: String) {
        write(text + "\n", to: 2)
    }

    private static func write(_ text: String, to descriptor: Int32) {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
            if written < 0 && errno == EINTR { continue }
            // The reader went away (the demo ended): nothing useful can be done with the rest.
            guard written > 0 else { return }
            bytes = bytes.dropFirst(written)
        }
    }

    /// Seconds with two decimals (`4.25s`); `unlimited` for UIKit's foreground value.
    static func seconds(_ value: TimeInterval) -> String {
        guard value < .greatestFiniteMagnitude else { return "unlimited" }
        let hundredths = Int((max(0, value) * 100).rounded(.down))
        let fraction = hundredths % 100
        return "\(hundredths / 100).\(fraction < 10 ? "0" : "")\(fraction)s"
    }

    /// `event KIND id=N` and the details the kind carries.
    static func describe(_ event: EventInfo) -> String {
        var words = ["event", event.kind.rawValue, "id=\(event.id)"]
        if let taskIds = event.taskIds {
            words.append("taskIds=[" + taskIds.map(String.init).joined(separator: ",") + "]")
        }
        if let name = event.name { words.append("name=\(name)") }
        if let count = event.count { words.append("count=\(count)") }
        if let payload = event.payload { words.append("payload=\(json(payload))") }
        if let likelyVictim = event.likelyVictim { words.append("likelyVictim=\(likelyVictim)") }
        if let rank = event.rank { words.append("rank=\(rank)") }
        return words.joined(separator: " ")
    }

    /// Compact JSON with sorted keys, as the payload was posted.
    static func json(_ payload: [String: JSONValue]) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(payload) else { return "(unprintable)" }
        return String(decoding: data, as: UTF8.self)
    }
}

extension Duration {
    /// The duration in seconds, as Foundation and Dispatch take it.
    var timeInterval: TimeInterval {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
