// Which CPUs a thread may run on: read and set through sched_getaffinity(2) and sched_setaffinity(2).
import BGTaskPOSIX
import CPOSIX
import Glibc

/// A set of CPU numbers (0 is the first CPU), as the bit mask of `sched_setaffinity(2)` holds them.
public struct CPUSet: Hashable, Sendable, CustomStringConvertible {
    /// The CPU numbers, ascending, each once.
    public let numbers: [Int]

    /// The set of `numbers` (negative numbers are not CPUs and are left out).
    public init(_ numbers: some Sequence<Int>) {
        self.numbers = Array(Set(numbers.filter { $0 >= 0 })).sorted()
    }

    /// The numbers separated by commas, as `taskset -c` writes them: "0,1".
    public var description: String { numbers.map(String.init).joined(separator: ",") }

    /// The set as a kernel CPU mask of `words` unsigned longs (numbers past the mask are left out).
    func mask(words: Int) -> [UInt] {
        var mask = [UInt](repeating: 0, count: words)
        for number in numbers where number < words * UInt.bitWidth {
            mask[number / UInt.bitWidth] |= 1 << UInt(number % UInt.bitWidth)
        }
        return mask
    }

    /// The CPUs set in a kernel CPU mask.
    init(mask: [UInt]) {
        var numbers: [Int] = []
        for (index, word) in mask.enumerated() {
            for bit in 0..<UInt.bitWidth where word & (1 << UInt(bit)) != 0 {
                numbers.append(index * UInt.bitWidth + bit)
            }
        }
        self.numbers = numbers
    }
}

/// The CPUs threads may run on: `sched_getaffinity(2)` and `sched_setaffinity(2)` on thread ids (a process's
/// threads are listed in `/proc/PID/task`; thread id 0 is the calling thread). A thread a pinned thread starts
/// inherits its mask, and so does a process it forks.
public enum CPUAffinity {
    /// The mask size tried first, in unsigned longs: 1024 CPUs, glibc's `cpu_set_t`. It doubles while the
    /// kernel refuses it as smaller than its own (EINVAL), up to `largestMaskWords`.
    static let firstMaskWords = 1024 / UInt.bitWidth
    /// 65,536 CPUs: past any machine Linux runs on (its `NR_CPUS` is at most 8192), so EINVAL there is real.
    static let largestMaskWords = 65_536 / UInt.bitWidth

    /// The CPUs thread `threadID` (0: the calling thread) may run on.
    public static func allowedCPUs(ofThread threadID: pid_t = 0) throws(Errno) -> CPUSet {
        var words = firstMaskWords
        while true {
            var mask = [UInt](repeating: 0, count: words)
            do throws(Errno) {
                _ = try systemCall("sched_getaffinity(\(threadID))") {
                    bgtask_sched_getaffinity(threadID, words, &mask)
                }
                return CPUSet(mask: mask)
            } catch {
                guard error == .invalidArgument && words < largestMaskWords else { throw error }
                words *= 2
            }
        }
    }

    /// Lets thread `threadID` (0: the calling thread) run only on `cpus`; throws EINVAL when none of them is
    /// online and allowed, ESRCH when the thread is gone.
    public static func restrict(thread threadID: pid_t, to cpus: CPUSet) throws(Errno) {
        let highest = cpus.numbers.last ?? 0
        let words = max(firstMaskWords, highest / UInt.bitWidth + 1)
        let mask = cpus.mask(words: words)
        _ = try systemCall("sched_setaffinity(\(threadID), \(cpus))") {
            bgtask_sched_setaffinity(threadID, words, mask)
        }
    }

    /// Lets every thread of process `pid` run only on `cpus`, each thread listed in `procFS`'s `PID/task`;
    /// returns how many threads were restricted. A thread that ended between the listing and its turn is
    /// skipped; a thread started meanwhile by one not yet restricted keeps the old mask, so a caller that needs
    /// them all calls this again once the process is quiet. Throws ENOENT (from the listing) when the process is
    /// gone.
    @discardableResult
    public static func restrict(process pid: pid_t, to cpus: CPUSet, procFS: ProcFS = ProcFS()) throws(Errno) -> Int {
        var restricted = 0
        for threadID in try procFS.threadIDs(of: pid) {
            do throws(Errno) {
                try restrict(thread: threadID, to: cpus)
                restricted += 1
            } catch {
                // Ended since the listing: nothing of it is left to run anywhere.
                guard error == .noSuchProcess else { throw error }
            }
        }
        return restricted
    }
}
