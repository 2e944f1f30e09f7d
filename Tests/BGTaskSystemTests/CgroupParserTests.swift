// The cgroup file parsers, row by row: what the kernel prints, and hostile or damaged text refused.

import BGTaskPOSIX
import BGTaskSystem
import Testing

@Suite("cgroup file parsers")
struct CgroupParserTests {
    @Test("/proc/PID/cgroup: hybrid and unified hosts, a path holding ':'")
    func processCgroupGoodRows() throws {
        let hybrid = try ProcessCgroup.parse(
            "9:name=systemd:/\n6:freezer:/app\n4:memory:/user.slice/app\n1:cpu,cpuacct:/\n0::/app.scope\n")
        #expect(hybrid.count == 5)
        #expect(hybrid[1] == ProcessCgroup(hierarchyID: 6, controllers: ["freezer"], path: "/app"))
        #expect(hybrid[3].controllers == ["cpu", "cpuacct"])
        #expect(hybrid[4].isUnified && hybrid[4].path == "/app.scope")
        #expect(!hybrid[0].isUnified)
        let odd = try ProcessCgroup.parse("0::/user.slice/a:b c\n")
        #expect(odd == [ProcessCgroup(hierarchyID: 0, controllers: [], path: "/user.slice/a:b c")])
    }

    @Test(
        "/proc/PID/cgroup: damaged and hostile text is refused",
        arguments: [
            "", "\n", "0::\n", "x::/\n", "-1::/\n", "+0::/\n", "0:/\n", "0::relative\n", "0::/gone (deleted)\n",
            "4:memory,,cpu:/\n", "0:memory:/\n",
        ])
    func processCgroupBadRows(_ text: String) {
        #expect(throws: ProcParseError.self) { _ = try ProcessCgroup.parse(text) }
    }

    @Test("cgroup.events and the other flat keyed files")
    func keyedValues() throws {
        let events = try CgroupKeyedValues.parse("populated 1\nfrozen 0\n", file: "cgroup.events")
        #expect(events["populated"] == 1 && events["frozen"] == 0 && events["other"] == nil)
        #expect(try CgroupKeyedValues.parse("", file: "x").values.isEmpty)
        for bad in ["populated 1", "populated\n", "populated -1\n", "populated +1\n", "a 1\na 2\n", "a 1 2\n"] {
            #expect(throws: ProcParseError.self, "\(bad.debugDescription)") {
                _ = try CgroupKeyedValues.parse(bad, file: "x")
            }
        }
    }

    @Test("cgroup.procs, single numbers and freezer.state")
    func smallFiles() throws {
        #expect(try CgroupProcesses.parse("42\n43\n") == [42, 43])
        #expect(try CgroupProcesses.parse("") == [])
        for bad in ["42", "0\n", "-4\n", "+4\n", "4\n\n", "x\n", "99999999999\n"] {
            #expect(throws: ProcParseError.self, "\(bad.debugDescription)") { _ = try CgroupProcesses.parse(bad) }
        }
        #expect(try CgroupNumber.parse("67108864\n", file: "memory.current") == 67_108_864)
        for bad in ["67108864", "max\n", "-1\n", "\n", "1 2\n"] {
            #expect(throws: ProcParseError.self, "\(bad.debugDescription)") {
                _ = try CgroupNumber.parse(bad, file: "memory.current")
            }
        }
        #expect(try FreezerState.parse("FROZEN\n") == .frozen)
        #expect(try FreezerState.parse("FREEZING\n") == .freezing)
        for bad in ["FROZEN", "frozen\n", "THAWED \n", ""] {
            #expect(throws: ProcParseError.self, "\(bad.debugDescription)") { _ = try FreezerState.parse(bad) }
        }
    }
}
