// Real children: spawning, pidfd exit detection, stop/continue, redirections, locks and PSS of a child.
import BGTaskPOSIX
import BGTaskTestSupport
import Glibc
import Testing

@Suite struct ProcessTests {
    @Test func pidfdSeesExitAndWaitReportsTheKillingSignal() async throws {
        try await offThePool {
            let child = try ProcessSpawner.spawn(["sleep", "30"])
            defer { try? child.pidFD.close() }
            #expect(try !child.pidFD.hasExited)
            #expect(try !child.pidFD.waitForExit(timeout: .milliseconds(20)))
            #expect(try child.exitStatusIfExited() == nil)
            try child.pidFD.sendSignal(.kill)
            #expect(try child.pidFD.waitForExit(timeout: .seconds(10)))
            #expect(try child.pidFD.hasExited)
            #expect(try child.waitForExit() == .signaled(.kill))
            // Reaped: the pidfd still names the dead process and never another one.
            #expect(throws: Errno.noSuchProcess) { try child.pidFD.sendSignal(.terminate) }
        }
    }

    @Test func exitCodeIsReported() async throws {
        try await offThePool {
            let child = try ProcessSpawner.spawn(["sh", "-c", "exit 7"])
            defer { try? child.pidFD.close() }
            #expect(try child.pidFD.waitForExit(timeout: .seconds(10)))
            #expect(try child.exitStatusIfExited() == .exited(7))
        }
    }

    @Test func missingProgramFailsWithTheSpawnError() async throws {
        await offThePool {
            let error = #expect(throws: Errno.self) {
                try ProcessSpawner.spawn(["bgtask-no-such-program-\(getpid())"])
            }
            #expect(error == .noSuchFileOrDirectory)
            #expect(error?.description.hasPrefix("posix_spawnp(bgtask-no-such-program-") == true)
            #expect(throws: Errno.invalidArgument) { try ProcessSpawner.spawn([]) }
        }
    }

    @Test func stopMakesStatShowStoppedAndContinueResumes() async throws {
        try await offThePool {
            let procFS = ProcFS()
            try withChild(["sleep", "30"]) { child in
                try child.pidFD.sendSignal(.stop)
                #expect(try child.waitForChange() == .stopped(.stop))
                #expect(try procFS.stat(child.pid).state == .stopped)
                try child.pidFD.sendSignal(.continue)
                #expect(try child.waitForChange() == .continued)
                #expect(try procFS.stat(child.pid).state != .stopped)
            }
        }
    }

    @Test func standardStreamsAndEnvironmentAreRedirected() async throws {
        try await offThePool {
            let (readEnd, writeEnd) = try FileDescriptor.pipe()
            defer { try? readEnd.close() }
            let options = SpawnOptions(
                standardInput: .nullDevice, standardOutput: .fileDescriptor(writeEnd),
                standardError: .fileDescriptor(writeEnd),
                environment: ["BGTASK_TEST_VALUE=hello world", "PATH=/usr/bin:/bin"])
            let script = #"printf '%s|' "$BGTASK_TEST_VALUE"; cat; printf 'err' >&2; ls /proc/self/fd | wc -l"#
            let output = try withChild(["sh", "-c", script], options: options) { child in
                try writeEnd.close()  // Our copy; end of file then comes when the child exits.
                let text = try readToEnd(readEnd)
                #expect(try child.waitForExit() == .exited(0))
                return text
            }
            let parts = output.split(separator: "|", maxSplits: 1)
            #expect(parts.first == "hello world")
            // stdin was /dev/null (cat printed nothing), stderr went to the pipe, and the child saw only fds
            // 0, 1, 2 and the one `ls` opened to list them: nothing of ours leaked.
            #expect(parts.last.map { $0.hasPrefix("err") } == true)
            #expect(parts.last?.dropFirst(3).split(separator: "\n").first == "4")
        }
    }

    @Test func newProcessGroupAndNewSession() async throws {
        try await offThePool {
            let procFS = ProcFS()
            try withChild(["sleep", "30"]) { child in
                let stat = try procFS.stat(child.pid)
                #expect(stat.processGroupID == getpgrp())
                #expect(stat.parentPID == getpid())
            }
            try withChild(["sleep", "30"], options: SpawnOptions(flags: .newProcessGroup)) { child in
                let stat = try procFS.stat(child.pid)
                #expect(stat.processGroupID == child.pid)
                #expect(stat.sessionID == getsid(0))
            }
            try withChild(["sleep", "30"], options: SpawnOptions(flags: .newSession)) { child in
                let stat = try procFS.stat(child.pid)
                #expect(stat.processGroupID == child.pid)
                #expect(stat.sessionID == child.pid)
            }
        }
    }

    @Test func childStartsWithSignalsUnblockedEvenWhenTheParentBlocksThem() async throws {
        try await offThePool {
            let wasBlocked = try Signal.isBlocked(.user1)
            try Signal.block([.user1])
            defer { if !wasBlocked { try? Signal.unblock([.user1]) } }
            try withChild(["sleep", "30"]) { child in
                try child.pidFD.sendSignal(.user1)
                #expect(try child.waitForExit() == .signaled(.user1))
            }
        }
    }

    @Test func releaseMemoryOfAKilledChild() async throws {
        try await offThePool {
            try withChild(["sleep", "30"]) { child in
                // A live process is not dying, so there is nothing to release yet.
                #expect(throws: Errno.invalidArgument) { try child.pidFD.releaseMemory() }
                try child.pidFD.sendSignal(.kill)
                try child.pidFD.releaseMemory()
                #expect(try child.waitForExit() == .signaled(.kill))
            }
        }
    }

    @Test func openingAPidfdForAnExitedProcessFails() async throws {
        try await offThePool {
            let child = try ProcessSpawner.spawn(["true"])
            try child.pidFD.close()
            var status: Int32 = 0
            #expect(waitpid(child.pid, &status, 0) == child.pid)
            #expect(throws: Errno.noSuchProcess) { try PidFD.open(pid: child.pid) }
        }
    }

    @Test func statOfSelfMatchesTheKernelsOtherAnswers() async throws {
        try await offThePool {
            let stat = try ProcFS().stat(getpid())
            #expect(stat.pid == getpid())
            #expect(stat.parentPID == getppid())
            #expect(stat.processGroupID == getpgrp())
            #expect(stat.sessionID == getsid(0))
            // The process's line shows the main thread, which may sleep; this thread is the one running.
            #expect(try ProcessStat.parse(ProcFS().read("thread-self/stat")).state == .running)
            try withChild(["sleep", "30"]) { child in
                let childStat = try ProcFS().stat(child.pid)
                #expect(childStat.startTime >= stat.startTime)
                #expect(childStat.command == "sleep")
            }
        }
    }

    @Test func proportionalSetSizeOfAChildIsWithinItsResidentSize() async throws {
        try await offThePool {
            try withChild(["sleep", "30"]) { child in
                let procFS = ProcFS()
                let pss = try procFS.proportionalSetSize(child.pid)
                let rollup = try procFS.read("\(child.pid)/smaps_rollup")
                let rssLine = try #require(rollup.split(separator: "\n").first { $0.hasPrefix("Rss:") })
                let rssKibibytes = try #require(Int64(rssLine.split(separator: " ")[1]))
                #expect(pss > 0)
                #expect(pss <= rssKibibytes * 1024)
            }
        }
    }

    @Test func childHoldingLocksShowsInProcLocksWithItsPid() async throws {
        try await offThePool {
            try withTemporaryDirectory { directory in
                let flockPath = try directory.write("flock-target", "")
                let posixPath = try directory.write("posix-target", "")
                let (readEnd, writeEnd) = try FileDescriptor.pipe()
                defer { try? readEnd.close() }
                let script = """
                    import fcntl, sys, time
                    a = open(sys.argv[1], "w"); fcntl.flock(a, fcntl.LOCK_EX)
                    b = open(sys.argv[2], "w"); fcntl.lockf(b, fcntl.LOCK_EX, 10, 5)
                    print("locked", flush=True)
                    time.sleep(30)
                    """
                let options = SpawnOptions(standardOutput: .fileDescriptor(writeEnd))
                try withChild([python, "-c", script, flockPath, posixPath], options: options) { child in
                    try writeEnd.close()
                    #expect(try readUntil(UInt8(ascii: "\n"), from: readEnd) == "locked\n")
                    let locks = try ProcFS().locks().filter { $0.pid == child.pid }
                    var flockStatus = stat()
                    var posixStatus = stat()
                    #expect(lstat(flockPath, &flockStatus) == 0)
                    #expect(lstat(posixPath, &posixStatus) == 0)
                    let flockLock = try #require(locks.first { $0.kind == .flock })
                    #expect(flockLock.file?.inode == UInt64(flockStatus.st_ino))
                    #expect(flockLock.access == .write)
                    #expect(!flockLock.isBlockedWaiter)
                    let posixLock = try #require(locks.first { $0.kind == .posix })
                    #expect(posixLock.file?.inode == UInt64(posixStatus.st_ino))
                    #expect(posixLock.start == 5)
                    #expect(posixLock.end == 14)
                    // The device the kernel prints is the one stat reports for the file.
                    let device = UInt64(flockStatus.st_dev)
                    let major = UInt32(truncatingIfNeeded: ((device >> 8) & 0xfff) | ((device >> 32) & ~0xfff))
                    let minor = UInt32(truncatingIfNeeded: (device & 0xff) | ((device >> 12) & ~0xff))
                    #expect(flockLock.file?.deviceMajor == major)
                    #expect(flockLock.file?.deviceMinor == minor)
                }
            }
        }
    }

    @Test func systemMemoryAndPressureAreReadable() async throws {
        try await offThePool {
            let procFS = ProcFS()
            let memory = try procFS.memoryInfo()
            // glibc derives _SC_PHYS_PAGES from the same kernel counter as MemTotal.
            let physicalBytes = Int64(sysconf(Int32(_SC_PHYS_PAGES))) * Int64(sysconf(Int32(_SC_PAGESIZE)))
            #expect(memory.totalBytes == physicalBytes)
            #expect(memory.availableBytes <= memory.totalBytes)
            let pressure = try procFS.pressure(resource: .memory)
            #expect((0...100).contains(pressure.some.average10))
            #expect(pressure.full != nil)
        }
    }

    @Test func injectedRootReadsAFakeTree() async throws {
        try await offThePool {
            try withTemporaryDirectory { directory in
                try directory.write(
                    "4242/stat", "4242 (fake app) T 1 4242 4242 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0\n")
                try directory.write("pressure/memory", "some avg10=1.50 avg60=0.20 avg300=0.00 total=12345\n")
                let procFS = ProcFS(root: directory.path)
                let stat = try procFS.stat(4242)
                #expect(stat.command == "fake app")
                #expect(stat.state == .stopped)
                #expect(stat.startTime == 777)
                #expect(try procFS.pressure(resource: .memory).some.average10 == 1.5)
                #expect(throws: Errno.noSuchFileOrDirectory) { try procFS.stat(4243) }
            }
        }
    }
}

@Suite struct ProcessGroupTests {
    @Test func leaderAndMemberAreTold() async throws {
        try await offThePool {
            let selfLeads = try ProcessGroup.isLeader(getpid())
            #expect(selfLeads == (getpgrp() == getpid()))
            try withChild(["sleep", "30"], options: SpawnOptions(flags: .newProcessGroup)) { leader in
                let leads = try ProcessGroup.isLeader(leader.pid)
                let group = try ProcessGroup.of(leader.pid)
                #expect(leads)
                #expect(group.id == leader.pid)
            }
            try withChild(["sleep", "30"]) { member in
                let leads = try ProcessGroup.isLeader(member.pid)
                let group = try ProcessGroup.of(member.pid)
                #expect(!leads)
                #expect(group.id == getpgrp())
            }
        }
    }

    @Test func signallingAGroupReachesEveryMember() async throws {
        try await offThePool {
            let procFS = ProcFS()
            // A shell leading its own group, with a child in the same group; the shell prints the child's pid.
            let (readEnd, writeEnd) = try FileDescriptor.pipe()
            var options = SpawnOptions(flags: .newProcessGroup)
            options.standardOutput = .fileDescriptor(writeEnd)
            try withChild(["sh", "-c", "sleep 30 & echo $!; wait"], options: options) { shell in
                try writeEnd.close()
                defer { try? readEnd.close() }
                let line = try readUntil(UInt8(ascii: "\n"), from: readEnd)
                let member = try #require(line.split(separator: "\n").first.flatMap { pid_t($0) })
                let group = ProcessGroup(id: shell.pid)
                try group.send(.stop)
                #expect(try shell.waitForChange() == .stopped(.stop))
                let memberStopped = try waitForState(of: member, procFS) { $0 == .stopped }
                #expect(memberStopped)
                try group.send(.continue)
                let memberRunning = try waitForState(of: member, procFS) { $0 != .stopped }
                #expect(memberRunning)
                try group.send(.kill)
            }
            #expect(throws: Errno.noSuchProcess) { try ProcessGroup.of(999_999_999) }
        }
    }

    /// Waits up to 10 s for `pid`'s state to satisfy `condition` (a signal to a non-child is seen only in /proc).
    private func waitForState(
        of pid: pid_t, _ procFS: ProcFS, _ condition: (ProcessState) -> Bool
    ) throws -> Bool {
        let pidFD = try PidFD.open(pid: pid)
        defer { try? pidFD.close() }
        for _ in 0..<1000 {
            if condition(try procFS.stat(pid).state) { return true }
            // Bounded wait between reads: the pidfd only reports exit, not stops.
            _ = try pidFD.waitForExit(timeout: .milliseconds(10))
        }
        return false
    }
}
