// The sd-bus message builder and reader round trip, signatures, unit paths and addresses: no systemd needed.
import CSystemd
import Glibc
import Testing

@testable import BGTaskPOSIX
@testable import BGTaskSystem

/// A method call built by `build` on a bus that is only started (on one end of a socket pair, never answered), then
/// sealed and rewound, so that `read` sees it as a received message.
private func withSealedMessage<Result>(
    _ build: (OpaquePointer) throws -> Void, read: (inout BusMessageReader) throws -> Result
) throws -> Result {
    let (ours, theirs) = try UnixSocket.pair()
    defer { try? theirs.close() }
    var created: OpaquePointer?
    #expect(sd_bus_new(&created) >= 0)
    let bus = try #require(created)
    defer { sd_bus_close_unref(bus) }
    // The bus owns `ours` from here on.
    #expect(sd_bus_set_fd(bus, ours.rawValue, ours.rawValue) >= 0)
    #expect(sd_bus_start(bus) >= 0)
    var made: OpaquePointer?
    #expect(sd_bus_message_new_method_call(bus, &made, "org.example.Peer", "/org/example", "org.example.I", "M") >= 0)
    let message = try #require(made)
    defer { sd_bus_message_unref(message) }
    try build(message)
    #expect(sd_bus_message_seal(message, 1, 0) >= 0)
    #expect(sd_bus_message_rewind(message, 1) >= 0)
    var reader = BusMessageReader(message: message)
    return try read(&reader)
}

/// The arguments of a `StartTransientUnit` call, as the daemon will send them.
private let transientUnitArguments: [BusValue] = [
    .string("app-bgtask-example-1.service"), .string("fail"),
    .array(
        element: "(sv)",
        [
            UnitProperty.description("an example").busValue,
            UnitProperty.execStart([ExecCommand(path: "/bin/sleep", arguments: ["sleep", "60"])]).busValue,
            UnitProperty.environment(["A=1", "B=two words"]).busValue,
            UnitProperty.collectMode("inactive-or-failed").busValue,
            UnitProperty.oomScoreAdjust(-100).busValue,
            UnitProperty.processes([1234]).busValue,
            UnitProperty("MemoryMax", .uint64(1 << 30)).busValue,
            UnitProperty("CPUQuotaPerSecUSec", .uint64(UInt64.max)).busValue,
            UnitProperty("RuntimeMaxUSec", .int64(-1)).busValue,
            UnitProperty("SendSIGHUP", .boolean(true)).busValue,
            UnitProperty("Job", .objectPath("/org/freedesktop/systemd1/job/7")).busValue,
        ]),
    .array(element: "(sa(sv))", []),
]

@Suite("sd-bus messages")
struct BusMessageTests {
    @Test("a StartTransientUnit call reads back as it was built, with the signature systemd expects")
    func transientUnitRoundTrip() throws {
        let (signature, values) = try withSealedMessage { message in
            try appendBusValues(transientUnitArguments, to: message)
        } read: { reader in
            let signature = reader.signature
            var values: [BusValue] = []
            while !reader.isAtEnd { values.append(try #require(try reader.readValue())) }
            return (signature, values)
        }
        #expect(signature == "ssa(sv)a(sa(sv))")
        #expect(values == transientUnitArguments)
    }

    @Test("every basic type and an array of strings, read with the typed readers")
    func typedReaders() throws {
        let arguments: [BusValue] = [
            .string("text"), .objectPath("/a/b_c"), .boolean(true), .boolean(false), .int32(-7),
            .uint32(UInt32.max), .int64(Int64.min), .uint64(UInt64.max), .strings(["x", "", "z z"]),
            .variant(.uint32(42)),
        ]
        try withSealedMessage { message in
            try appendBusValues(arguments, to: message)
        } read: { reader in
            // The reader cannot be copied, so it cannot go inside #expect: each value is read first.
            let signature = reader.signature
            let string = try reader.readString()
            let path = try reader.readObjectPath()
            let yes = try reader.readBoolean()
            let no = try reader.readBoolean()
            let int32 = try reader.readInt32()
            let uint32 = try reader.readUInt32()
            let int64 = try reader.readInt64()
            let uint64 = try reader.readUInt64()
            let strings = try reader.readStringArray()
            let variant = try reader.readVariant()
            let isAtEnd = reader.isAtEnd
            #expect(signature == "sobbiuxtasv")
            #expect(string == "text" && path == "/a/b_c" && yes && !no)
            #expect(int32 == -7 && uint32 == UInt32.max && int64 == Int64.min && uint64 == UInt64.max)
            #expect(strings == ["x", "", "z z"])
            #expect(variant == .uint32(42))
            #expect(isAtEnd)
            // Past the end: a typed error, never a crash.
            do throws(ServiceManagerError) {
                _ = try reader.readString()
                Issue.record("read past the end")
            } catch {
                guard case .malformed = error else {
                    Issue.record("\(error)")
                    return
                }
            }
        }
    }

    @Test("a reply of another type than expected is a malformed-message error")
    func wrongTypes() throws {
        try withSealedMessage { message in
            try appendBusValues([.uint32(5), .string("s")], to: message)
        } read: { reader in
            do throws(ServiceManagerError) {
                _ = try reader.readString()
                Issue.record("a uint32 read as a string")
            } catch {
                guard case .malformed = error else {
                    Issue.record("\(error)")
                    return
                }
            }
            // The failed read moved nothing: the value is still there to be read as what it is.
            let number = try reader.readUInt32()
            #expect(number == 5)
            var failures = 0
            do { _ = try reader.readStringArray() } catch { failures += 1 }
            do { _ = try reader.readVariant() } catch { failures += 1 }
            #expect(failures == 2)
            let string = try reader.readString()
            #expect(string == "s")
        }
    }

    @Test("a property dictionary keeps the types it knows and skips the others, whole")
    func propertiesSkipUnknownTypes() throws {
        let properties = try withSealedMessage { message in
            // GetAll's a{sv}, with the awkward values of a real Service object between the useful ones.
            func entry(_ name: String, _ type: String, _ body: () -> Void) {
                #expect(sd_bus_message_open_container(message, busTypeCode("e"), "sv") >= 0)
                #expect(name.withCString { sd_bus_message_append_basic(message, busTypeCode("s"), $0) } >= 0)
                #expect(sd_bus_message_open_container(message, busTypeCode("v"), type) >= 0)
                body()
                #expect(sd_bus_message_close_container(message) >= 0)
                #expect(sd_bus_message_close_container(message) >= 0)
            }
            #expect(sd_bus_message_open_container(message, busTypeCode("a"), "{sv}") >= 0)
            entry("MainPID", "u") {
                var pid: UInt32 = 4321
                #expect(sd_bus_message_append_basic(message, busTypeCode("u"), &pid) >= 0)
            }
            entry("Nice", "y") {
                var byte: UInt8 = 3
                #expect(sd_bus_message_append_basic(message, busTypeCode("y"), &byte) >= 0)
            }
            entry("CPUWeight", "d") {
                var double = 1.5
                #expect(sd_bus_message_append_basic(message, busTypeCode("d"), &double) >= 0)
            }
            entry("ExecStart", "a(sasbttttuii)") {
                #expect(sd_bus_message_open_container(message, busTypeCode("a"), "(sasbttttuii)") >= 0)
                #expect(sd_bus_message_close_container(message) >= 0)
            }
            entry("RootHash", "ay") {
                #expect(sd_bus_message_open_container(message, busTypeCode("a"), "y") >= 0)
                for var byte in [UInt8(1), 2, 3] {
                    #expect(sd_bus_message_append_basic(message, busTypeCode("y"), &byte) >= 0)
                }
                #expect(sd_bus_message_close_container(message) >= 0)
            }
            entry("Extras", "a{sv}") {
                #expect(sd_bus_message_open_container(message, busTypeCode("a"), "{sv}") >= 0)
                #expect(sd_bus_message_close_container(message) >= 0)
            }
            entry("Mixed", "av") {
                #expect(sd_bus_message_open_container(message, busTypeCode("a"), "v") >= 0)
                #expect(sd_bus_message_open_container(message, busTypeCode("v"), "y") >= 0)
                var byte: UInt8 = 1
                #expect(sd_bus_message_append_basic(message, busTypeCode("y"), &byte) >= 0)
                #expect(sd_bus_message_close_container(message) >= 0)
                #expect(sd_bus_message_close_container(message) >= 0)
            }
            entry("ControlGroup", "s") {
                let path = "/app.slice/x.service"
                #expect(path.withCString { sd_bus_message_append_basic(message, busTypeCode("s"), $0) } >= 0)
            }
            entry("ExecMainCode", "i") {
                var code: Int32 = 2
                #expect(sd_bus_message_append_basic(message, busTypeCode("i"), &code) >= 0)
            }
            #expect(sd_bus_message_close_container(message) >= 0)
        } read: { reader in
            let properties = UnitProperties(try reader.readProperties())
            let isAtEnd = reader.isAtEnd
            #expect(isAtEnd)
            return properties
        }
        #expect(properties.values.keys.sorted() == ["ControlGroup", "ExecMainCode", "ExecStart", "MainPID"])
        #expect(properties["ExecStart"] == .array(element: "(sasbttttuii)", []))
        #expect(properties.mainPID == 4321)
        #expect(properties.controlGroup == "/app.slice/x.service")
        #expect(properties.execMainCode == 2)
        #expect(properties.execMainStatus == nil)
    }

    /// Values the builder refuses before sd-bus sees them, each with what was wrong.
    static let refusedValues: [(BusValue, String)] = [
        (.string("a\u{0}b"), "NUL"),
        (.objectPath("relative/path"), "object path"),
        (.objectPath("/trailing/"), "object path"),
        (.objectPath("/double//slash"), "object path"),
        (.objectPath("/dash-ed"), "object path"),
        (.array(element: "s", [.string("a"), .uint32(1)]), "signature u"),
        (.array(element: "ss", []), "element signature"),
        (.array(element: "(", []), "element signature"),
        (.structure([]), "empty structure"),
        (.variant(.array(element: "s", [.int32(1)])), "signature i"),
        (.array(element: "(sv)", [UnitProperty("Job", .objectPath("job/7")).busValue]), "object path"),
    ]

    @Test("values sd-bus would refuse are refused first, saying why", arguments: 0..<refusedValues.count)
    func refusedValue(_ index: Int) throws {
        let (value, reason) = Self.refusedValues[index]
        try withSealedMessage { message in
            do throws(ServiceManagerError) {
                try appendBusValue(value, to: message)
                Issue.record("\(value) was accepted")
            } catch {
                guard case .malformed(let what) = error else {
                    Issue.record("\(value): \(error)")
                    return
                }
                #expect(what.contains(reason), "\(value): \(what)")
            }
        } read: { _ in
        }
    }

    @Test(
        "signatures of one complete type",
        arguments: [
            ("s", true), ("as", true), ("a(sv)", true), ("a{sv}", true), ("(sasb)", true), ("a(sasbttttuii)", true),
            ("", false), ("ss", false), ("a", false), ("(", false), ("()", false), ("{s}", false), ("{sss}", false),
            ("a{sv", false), ("z", false),
        ])
    func completeTypes(_ signature: String, _ isSingle: Bool) {
        #expect(isSingleCompleteType(signature) == isSingle)
    }

    @Test(
        "unit object paths as systemd escapes them",
        arguments: [
            ("app-bgtask-notes-1f2e.service", "/org/freedesktop/systemd1/unit/app_2dbgtask_2dnotes_2d1f2e_2eservice"),
            ("init.scope", "/org/freedesktop/systemd1/unit/init_2escope"),
            ("1x.service", "/org/freedesktop/systemd1/unit/_31x_2eservice"),
            ("a_b@c.service", "/org/freedesktop/systemd1/unit/a_5fb_40c_2eservice"),
            ("", "/org/freedesktop/systemd1/unit/_"),
        ])
    func unitPaths(_ name: String, _ path: String) {
        #expect(ServiceManagerConnection.unitPath(for: name).rawValue == path)
        #expect(ServiceManagerConnection.unitPath(for: name).isValid)
    }

    @Test("endpoint addresses escape what D-Bus addresses reserve")
    func addresses() {
        let plain = ServiceManagerEndpoint(kind: .direct, socketPath: "/run/user/1000/systemd/private")
        #expect(plain.address == "unix:path=/run/user/1000/systemd/private")
        let odd = ServiceManagerEndpoint(kind: .bus, socketPath: "/x/a b;c=d,é")
        #expect(odd.address == "unix:path=/x/a%20b%3bc%3dd%2c%c3%a9")
        #expect(
            ServiceManagerEndpoint.candidates(for: .user(runtimeDirectory: "/run/user/7")).map(\.socketPath) == [
                "/run/user/7/systemd/private", "/run/user/7/bus",
            ])
        #expect(
            ServiceManagerEndpoint.candidates(for: .system).map(\.kind) == [.direct, .bus])
    }
}
