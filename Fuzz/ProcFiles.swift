// libFuzzer target: every /proc parser of BGTaskSystem on any bytes, decoded as `ProcFS.read` decodes them.
//
// Each parser (stat, status's user ids, smaps_rollup's Pss, locks, fdinfo's lock lines, meminfo, pressure) must
// refuse with a `ProcParseError` or return values the kernel could print: a positive pid, uids that name a user,
// taken from the input's one line that starts with `Uid:`, a non-negative whole number of KiB, lock ranges that end
// after they start, available memory within the total, averages within 0–100. Stat lines, user ids, lock rows and
// meminfo figures written back in the kernel's format parse to the same values, and the stat line of
// a process named with the input's first bytes parses to that name. The line splitter behind `ProcFS.scanLines`,
// fed the input in chunks whose sizes come from the input, yields exactly the input's lines or refuses it. The
// cgroup files (`/proc/PID/cgroup`, whose paths hold names a user may choose, `cgroup.events`, `cgroup.procs`, a
// number, `freezer.state`) parse to values the kernel could print, and those written back parse the same.
import BGTaskPOSIX
import BGTaskSystem
import Glibc

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzProcFiles(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: start, count: count)
    let text = String(decoding: bytes, as: UTF8.self)
    checkCommandName(bytes)
    checkStat(text)
    checkUserIDs(text)
    checkProportionalSetSize(text)
    checkLocks(text)
    checkFileDescriptorLocks(text)
    checkLineSplitter(bytes)
    checkMemoryInfo(text)
    checkPressure(text)
    checkCgroupFiles(text)
    return 0
}

/// Runs `parse`, returning nil after checking that a refusal prints.
private func attempt<Value>(_ parse: () throws(ProcParseError) -> Value) -> Value? {
    do throws(ProcParseError) {
        return try parse()
    } catch {
        precondition(error.line.map { $0 >= 1 } ?? true, "error on line \(String(describing: error.line))")
        _ = error.description
        return nil
    }
}

private func checkStat(_ text: String) {
    guard let stat = attempt({ () throws(ProcParseError) in try ProcessStat.parse(text) }) else { return }
    precondition(stat.pid > 0, "stat pid \(stat.pid)")
    // Fields 7 to 21 as the kernel prints them for a sleeping process; the parser reads none of them.
    let middle = "0 -1 4194560 120 0 0 0 0 0 0 0 20 0 1 0"
    let line =
        "\(stat.pid) (\(stat.command)) \(stat.state.letter) \(stat.parentPID) \(stat.processGroupID) "
        + "\(stat.sessionID) \(middle) \(stat.startTime) 2383872 233\n"
    let again = attempt { () throws(ProcParseError) in try ProcessStat.parse(line) }
    precondition(again == stat, "stat \(stat) written as \(line.debugDescription) read as \(String(describing: again))")
}

/// The user ids of `status`: each names a user (never `(uid_t)-1`), they come from the only line of the input
/// that starts with `Uid:`, and written back in the kernel's form among other lines they read the same.
private func checkUserIDs(_ text: String) {
    guard let ids = attempt({ () throws(ProcParseError) in try ProcessUserIDs.parse(text) }) else { return }
    let all = [ids.real, ids.effective, ids.saved, ids.filesystem]
    precondition(!all.contains(uid_t.max), "user ids \(ids)")
    let uidLines = text.utf8.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        .filter { $0.starts(with: "Uid:".utf8) }
    precondition(uidLines.count == 1, "user ids \(ids) from \(uidLines.count) Uid lines")
    let written = "Name:\tx\nUid:\t" + all.map(String.init).joined(separator: "\t") + "\nGid:\t0\t0\t0\t0\n"
    let again = attempt { () throws(ProcParseError) in try ProcessUserIDs.parse(written) }
    precondition(
        again == ids, "user ids \(ids) written as \(written.debugDescription) read as \(String(describing: again))")
}

/// The stat line of a process that named itself with the input's first bytes (a command name is up to 15 bytes,
/// ending at a NUL, chosen freely with `prctl(PR_SET_NAME)`): it must parse, to that name.
private func checkCommandName(_ input: UnsafeBufferPointer<UInt8>) {
    let name = input.prefix(15).prefix { $0 != 0 }
    let line =
        Array("4242 (".utf8) + name
        + Array(") S 1 4242 4242 0 -1 4194560 120 0 0 0 0 0 0 0 20 0 1 0 8123 2383872 233\n".utf8)
    let command = String(decoding: name, as: UTF8.self)
    let stat = attempt { () throws(ProcParseError) in try ProcessStat.parse(String(decoding: line, as: UTF8.self)) }
    let expected = ProcessStat(
        pid: 4242, command: command, state: .sleeping, parentPID: 1, processGroupID: 4242, sessionID: 4242,
        startTime: 8123)
    precondition(
        stat == expected, "the stat of a process named \(command.debugDescription) read as \(String(describing: stat))")
}

private func checkProportionalSetSize(_ text: String) {
    guard let bytes = attempt({ () throws(ProcParseError) in try ProportionalSetSize.parse(text) }) else { return }
    precondition(bytes >= 0 && bytes % 1024 == 0, "Pss of \(bytes) bytes")
}

private func checkLocks(_ text: String) {
    guard let locks = attempt({ () throws(ProcParseError) in try FileLock.parseAll(text) }) else { return }
    for lock in locks {
        precondition(lock.pid >= -1, "lock pid \(lock.pid)")
        precondition(lock.start >= 0 && lock.end.map { $0 >= lock.start } ?? true, "lock range of \(lock)")
        let file = lock.file.map {
            String($0.deviceMajor, radix: 16) + ":" + String($0.deviceMinor, radix: 16) + ":" + String($0.inode)
        }
        let row =
            "\(lock.ordinal): \(lock.isBlockedWaiter ? "-> " : "")\(lock.kind.rawValue)  "
            + "\(lock.enforcement.rawValue)  \(lock.access.rawValue) \(lock.pid) \(file ?? "<none>") "
            + "\(lock.start) \(lock.end.map(String.init) ?? "EOF")"
        let again = attempt { () throws(ProcParseError) in try FileLock.parse(line: Substring(row)) }
        precondition(
            again == lock, "lock \(lock) written as \(row.debugDescription) read as \(String(describing: again))")
    }
}

private func checkMemoryInfo(_ text: String) {
    guard let info = attempt({ () throws(ProcParseError) in try MemoryInfo.parse(text) }) else { return }
    precondition(info.availableBytes >= 0 && info.availableBytes <= info.totalBytes, "meminfo \(info)")
    precondition(info.totalBytes % 1024 == 0 && info.availableBytes % 1024 == 0, "meminfo \(info) not in KiB")
    let written = "MemTotal: \(info.totalBytes / 1024) kB\nMemAvailable: \(info.availableBytes / 1024) kB\n"
    let again = attempt { () throws(ProcParseError) in try MemoryInfo.parse(written) }
    precondition(again == info, "meminfo \(info) written as \(written.debugDescription) read differently")
}

private func checkPressure(_ text: String) {
    guard let pressure = attempt({ () throws(ProcParseError) in try Pressure.parse(text) }) else { return }
    for stall in [pressure.some] + (pressure.full.map { [$0] } ?? []) {
        for average in [stall.average10, stall.average60, stall.average300] {
            precondition(average.isFinite && (0...100).contains(average), "pressure average \(average)")
        }
    }
}

private func checkCgroupFiles(_ text: String) {
    if let lines = attempt({ () throws(ProcParseError) in try ProcessCgroup.parse(text) }) {
        precondition(!lines.isEmpty, "no cgroup line")
        for line in lines {
            precondition(line.hierarchyID >= 0 && line.path.hasPrefix("/"), "cgroup line \(line)")
            precondition(!line.path.contains("\n") && !line.controllers.contains(where: \.isEmpty), "\(line)")
        }
        let written = lines.map { "\($0.hierarchyID):\($0.controllers.joined(separator: ",")):\($0.path)\n" }
        let again = attempt { () throws(ProcParseError) in try ProcessCgroup.parse(written.joined()) }
        precondition(again == lines, "cgroup lines \(lines) read back as \(String(describing: again))")
    }
    if let events = attempt({ () throws(ProcParseError) in try CgroupKeyedValues.parse(text, file: "events") }) {
        let written = events.values.map { "\($0.key) \($0.value)\n" }.joined()
        let again = attempt { () throws(ProcParseError) in try CgroupKeyedValues.parse(written, file: "events") }
        precondition(again == events, "keyed values \(events) read back as \(String(describing: again))")
    }
    if let pids = attempt({ () throws(ProcParseError) in try CgroupProcesses.parse(text) }) {
        precondition(pids.allSatisfy { $0 > 0 }, "cgroup.procs \(pids)")
        let again = attempt { () throws(ProcParseError) in try CgroupProcesses.parse(pids.map { "\($0)\n" }.joined()) }
        precondition(again == pids, "cgroup.procs \(pids) read back as \(String(describing: again))")
    }
    if let number = attempt({ () throws(ProcParseError) in try CgroupNumber.parse(text, file: "number") }) {
        let again = attempt { () throws(ProcParseError) in try CgroupNumber.parse("\(number)\n", file: "number") }
        precondition(again == number, "number \(number) read back as \(String(describing: again))")
    }
    if let state = attempt({ () throws(ProcParseError) in try FreezerState.parse(text) }) {
        precondition(text == state.rawValue + "\n", "freezer state \(state) from \(text.debugDescription)")
    }
}

private func checkFileDescriptorLocks(_ text: String) {
    guard let locks = attempt({ () throws(ProcParseError) in try FileDescriptorInfo.parseLocks(text) }) else { return }
    for lock in locks {
        precondition(lock.pid >= -1, "fdinfo lock pid \(lock.pid)")
        precondition(lock.start >= 0 && lock.end.map { $0 >= lock.start } ?? true, "fdinfo lock range of \(lock)")
    }
}

/// Feeds the input to a `LineSplitter` in chunks whose sizes are the input's bytes (1 to 256), with a small line
/// limit so both refusals are reached: the lines must be the input's newline-separated pieces, or the splitter
/// must refuse an input with a piece over the limit or without a final newline.
private func checkLineSplitter(_ bytes: UnsafeBufferPointer<UInt8>) {
    let limit = 64
    var splitter = LineSplitter(file: "fuzz", maximumLineLength: limit)
    var lines: [String] = []
    var offset = 0
    var sizeIndex = 0
    var refused = false
    let input = Array(bytes)
    while offset < input.count && !refused {
        let size = max(1, Int(input[sizeIndex % input.count]))
        sizeIndex += 1
        let end = min(input.count, offset + size)
        do {
            _ = try splitter.feed(input[offset..<end]) { line in
                lines.append(String(line))
                return true
            }
        } catch {
            refused = true
        }
        offset = end
    }
    if !refused {
        do {
            try splitter.finish()
        } catch {
            refused = true
        }
    }
    var pieces = input.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).map(Array.init)
    let endsInNewline = input.last == UInt8(ascii: "\n")
    if endsInNewline || input.isEmpty { pieces.removeLast() }
    let expectRefusal = !(endsInNewline || input.isEmpty) || pieces.contains { $0.count > limit }
    precondition(refused == expectRefusal, "refused: \(refused), expected: \(expectRefusal)")
    if !refused {
        precondition(lines == pieces.map { String(decoding: $0, as: UTF8.self) }, "the lines came out differently")
        precondition(splitter.lineCount == pieces.count)
    }
}
