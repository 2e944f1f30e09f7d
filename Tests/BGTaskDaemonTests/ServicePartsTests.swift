// The status reporter and the stream store alone, with fakes of the service manager and of the manager.

import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem
import Glibc
import Testing

@testable import BGTaskDaemon

/// The service manager as the parts see it: what they sent, and a store of `limit` descriptors.
private final class FakeServiceManager: StatusSink, DescriptorStoreBackend {
    var isSupervised = true
    var fileDescriptorStoreLimit = 2
    var statuses: [String] = []
    var stored: [String] = []
    var removed: [String] = []

    func status(_ text: String) throws(Errno) -> Bool {
        statuses.append(text)
        return true
    }

    func storeFileDescriptors(_ descriptors: [FileDescriptor], name: String) throws(Errno) -> Bool {
        stored.append(name)
        return true
    }

    func removeStoredFileDescriptors(name: String) throws(Errno) -> Bool {
        removed.append(name)
        return true
    }
}

private final class FakeStatusSource: StatusSource {
    var statusText = "0 apps"
}

@Suite("Status reporter and stream store alone")
struct ServicePartsTests {
    private let logger = Logger(destination: .stream, threshold: .error)

    @Test("the status goes out at once, then at most once a second, the last change always, an unchanged one never")
    func statusRateLimit() throws {
        let loop = try EventLoop()
        let clock = ManagerClock(mode: .manual(start: .seconds(100)), loop: loop)
        let service = FakeServiceManager()
        let source = FakeStatusSource()
        let reporter = StatusReporter(sink: service, clock: clock, logger: logger)
        reporter.source = source
        reporter.update()
        #expect(service.statuses == ["0 apps"])
        source.statusText = "1 apps"
        reporter.update()
        source.statusText = "2 apps"
        reporter.update()
        #expect(service.statuses == ["0 apps"], "sent within the interval")
        clock.advance(to: .seconds(101))
        #expect(service.statuses == ["0 apps", "2 apps"], "the last change was not sent when the interval ended")
        clock.advance(to: .seconds(103))
        reporter.update()
        #expect(service.statuses == ["0 apps", "2 apps"], "an unchanged status was sent again")
        #expect(reporter.sentStatus == "2 apps")
    }

    @Test("without a service manager no status is sent")
    func statusUnsupervised() throws {
        let loop = try EventLoop()
        let service = FakeServiceManager()
        service.isSupervised = false
        let source = FakeStatusSource()
        let reporter = StatusReporter(
            sink: service, clock: ManagerClock(mode: .manual(start: .seconds(1)), loop: loop), logger: logger)
        reporter.source = source
        reporter.update()
        #expect(service.statuses.isEmpty && reporter.sentStatus == nil)
    }

    @Test("streams are kept up to the store's limit; a closed one is let go of, but not while the daemon stops")
    func streamStoreLimit() throws {
        let service = FakeServiceManager()
        let store = StreamStore(backend: service, logger: logger)
        let (one, other) = try UnixSocket.pair()
        defer {
            try? one.close()
            try? other.close()
        }
        #expect(store.store(one, of: AppID(rawValue: 1), appName: "a") == nil, "kept before the limit was read")
        store.readLimit()
        #expect(store.store(one, of: AppID(rawValue: 1), appName: "a") == "app-1")
        #expect(store.store(one, of: AppID(rawValue: 2), appName: "b") == "app-2")
        #expect(store.store(one, of: AppID(rawValue: 3), appName: "c") == nil, "kept past the limit")
        #expect(service.stored == ["app-1", "app-2"] && store.count == 2)
        store.release(name: "app-1", isStopping: false)
        store.release(name: "app-2", isStopping: true)
        #expect(service.removed == ["app-1"] && store.count == 0)
        #expect(StreamStore.app(named: "app-7") == AppID(rawValue: 7))
        #expect(StreamStore.app(named: "app-x") == nil && StreamStore.app(named: "listen") == nil)
    }

    @Test("a handed-over stream nothing takes back is shut, closed and removed from the store")
    func streamStoreDrop() throws {
        let service = FakeServiceManager()
        let store = StreamStore(backend: service, logger: logger)
        let (kept, peer) = try UnixSocket.pair()
        defer { try? peer.close() }
        store.handOver(kept, name: "app-5")
        let handed = store.takeHandedOver()
        #expect(handed.map(\.name) == ["app-5"] && store.takeHandedOver().isEmpty)
        store.drop(kept, name: "app-5")
        #expect(service.removed == ["app-5"])
        // The peer sees the end of the stream.
        var byte: UInt8 = 0
        #expect(read(peer.rawValue, &byte, 1) == 0)
    }
}
