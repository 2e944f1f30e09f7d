// The launcher's child: from clone3 (or clone) to execve with raw system calls only (launch.h says why).
//
// Compiled with _GNU_SOURCE (the target's cSettings) for the GNU names it uses. Nothing after the clone, in the
// child, may call into glibc beyond syscall(), which only traps and sets errno, nor allocate: the parent is
// multi-threaded, and the child has a copy of its locks, held or not.
#include "launch.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

// For headers older than the kernel: the numbers are the same on every architecture (both calls came after the
// system call tables were unified in 5.1), and so are the flags.
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/// clone3's argument (Linux 5.3), declared here rather than from <linux/sched.h>, whose flags clash with <sched.h>.
struct bgtask_clone_args {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup;
};

/// Writes { step, errno } to the error pipe and exits 127: the parent reads the step from the pipe.
__attribute__((noreturn)) static void fail(int error_pipe, enum bgtask_launch_step step) {
    int report[2] = {(int)step, errno};
    (void)syscall(SYS_write, error_pipe, report, sizeof report);
    for (;;) (void)syscall(SYS_exit_group, 127);
}

/// `fd` itself when it is negative or above 2, else a close-on-exec copy of it at 3 or above (-1 with errno set
/// when there is none): somewhere no dup3 onto 0, 1 or 2 can overwrite it.
static int above_the_streams(int fd) {
    if (fd < 0 || fd > 2) return fd;
    return (int)syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, 3);
}

/// Makes the spec's three descriptors the child's 0, 1 and 2; `*error_pipe` moves above 2 if it was below 3.
///
/// The descriptors given may themselves be 0, 1 or 2 (a daemon started with a stream closed opens files there,
/// and the launcher's own /dev/null and error pipe get the lowest free numbers), so dup3 onto 0 first could
/// overwrite an output given as 0, or the error pipe. Every source not already in its place, and the error pipe,
/// first moves above 2; only then are 0, 1 and 2 written. A source already in its place stays: no other stream's
/// dup3 writes there. The copies are close-on-exec; the originals below 3 are all overwritten.
static void set_streams(const struct bgtask_launch_spec *spec, int *error_pipe) {
    int moved_pipe = above_the_streams(*error_pipe);
    if (moved_pipe < 0) fail(*error_pipe, BGTASK_LAUNCH_STREAMS);
    *error_pipe = moved_pipe;
    int sources[3] = {spec->standard_input, spec->standard_output, spec->standard_error};
    for (int target = 0; target < 3; target++) {
        if (sources[target] == target) continue;
        sources[target] = above_the_streams(sources[target]);
        if (sources[target] < 0) fail(*error_pipe, BGTASK_LAUNCH_STREAMS);
    }
    /* dup3 refuses to copy a descriptor onto itself: a stream in place is left as it is. */
    for (int target = 0; target < 3; target++) {
        if (sources[target] != target && syscall(SYS_dup3, sources[target], target, 0) < 0)
            fail(*error_pipe, BGTASK_LAUNCH_STREAMS);
    }
}

/// Marks every descriptor from 3 on close-on-exec: close_range (Linux 5.11), or where it fails (ENOSYS on older
/// kernels or under a filter, EINVAL) one by one below `open_file_limit`, the parent's RLIMIT_NOFILE, below which
/// every descriptor was opened. 0, or -1 with errno set.
static int close_others_on_exec(long open_file_limit) {
    if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return 0;
    for (long fd = 3; fd < open_file_limit; fd++) {
        long flags = syscall(SYS_fcntl, (int)fd, F_GETFD);
        if (flags < 0) {
            if (errno == EBADF) continue;
            return -1;
        }
        if ((flags & FD_CLOEXEC) == 0 && syscall(SYS_fcntl, (int)fd, F_SETFD, flags | FD_CLOEXEC) < 0) return -1;
    }
    return 0;
}

/// Writes `value` in decimal to the open /proc/self/oom_score_adj `fd`: 0, or -1 with errno set (EACCES: lower than
/// the kernel lets this process go without CAP_SYS_RESOURCE).
static int write_oom_score_adj(int fd, int value) {
    char text[12];
    int length = 0;
    unsigned int magnitude = value < 0 ? 0U - (unsigned int)value : (unsigned int)value;
    char digits[11];
    int count = 0;
    do {
        digits[count++] = (char)('0' + magnitude % 10U);
        magnitude /= 10U;
    } while (magnitude != 0U && count < 10);
    if (value < 0) text[length++] = '-';
    while (count > 0) text[length++] = digits[--count];
    long written = syscall(SYS_pwrite64, fd, text, (size_t)length, 0L);
    if (written == length) return 0;
    if (written >= 0) errno = EIO;
    return -1;
}

/// Reads the open /proc/self/oom_score_adj `fd` into `*value`: 0, or -1 with errno set.
static int read_oom_score_adj(int fd, int *value) {
    char text[16];
    long count = syscall(SYS_pread64, fd, text, sizeof text, 0L);
    if (count <= 0) {
        if (count == 0) errno = EIO;
        return -1;
    }
    int index = 0, sign = 1, number = 0, digits = 0;
    if (text[0] == '-') {
        sign = -1;
        index = 1;
    }
    for (; index < count && text[index] >= '0' && text[index] <= '9' && digits < 5; index++, digits++) {
        number = number * 10 + (text[index] - '0');
    }
    if (digits == 0) {
        errno = EIO;
        return -1;
    }
    *value = sign * number;
    return 0;
}

/// Sets /proc/self/oom_score_adj to `wanted`, or where the kernel refuses to lower it that far (EACCES: below the
/// floor this process inherited, without CAP_SYS_RESOURCE) to the nearest value it accepts, found by halving the
/// span between `wanted` and the value inherited (which is always accepted): at most 11 writes. 0, or -1 with errno
/// set.
static int set_oom_score_adj(int wanted) {
    int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/oom_score_adj", O_RDWR | O_CLOEXEC);
    if (fd < 0) return -1;
    int result = write_oom_score_adj(fd, wanted);
    if (result != 0 && (errno == EACCES || errno == EPERM)) {
        int refused = wanted, accepted;
        result = read_oom_score_adj(fd, &accepted);
        while (result == 0 && accepted - refused > 1) {
            int middle = refused + (accepted - refused) / 2;
            if (write_oom_score_adj(fd, middle) == 0) {
                accepted = middle;
            } else if (errno == EACCES || errno == EPERM) {
                refused = middle;
            } else {
                result = -1;
            }
        }
    }
    int saved = errno;
    (void)syscall(SYS_close, fd);
    errno = saved;
    return result;
}

/// The child, from its clone to its exec; never returns. `open_file_limit` is the parent's RLIMIT_NOFILE.
__attribute__((noreturn)) static void run_child(const struct bgtask_launch_spec *spec, long open_file_limit) {
    int error_pipe = spec->error_pipe;
    /* The kernel's struct sigaction (not glibc's): SIG_DFL, no flags, no restorer, empty mask. */
    struct {
        unsigned long handler;
        unsigned long flags;
        unsigned long restorer;
        unsigned long long mask;
    } default_action = {0};
    for (int number = 1; number < 65; number++) {
        if (number == SIGKILL || number == SIGSTOP) continue;
        (void)syscall(SYS_rt_sigaction, number, &default_action, NULL, 8);
    }
    unsigned long long no_signals = 0;
    if (syscall(SYS_rt_sigprocmask, SIG_SETMASK, &no_signals, NULL, 8) != 0) fail(error_pipe, BGTASK_LAUNCH_SIGNALS);
    if (syscall(SYS_setsid) < 0) fail(error_pipe, BGTASK_LAUNCH_SESSION);
    /* The daemon raised its own descriptor limit to the hard one; an app gets the usual soft limit of 1024
       (select(2) breaks past it), as systemd gives services, its hard limit unchanged. */
    struct {
        unsigned long long current, maximum;
    } files;
    if (syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, NULL, &files) == 0 && files.current > 1024) {
        files.current = files.maximum < 1024 ? files.maximum : 1024;
        (void)syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, &files, NULL);
    }
    /* The cgroup.procs descriptors are written here, before the streams are set, so none needs moving out of 0, 1
       or 2 first: a dup3 landing on one later only closes a descriptor already used. */
    for (int index = 0; index < spec->cgroup_count; index++) {
        if (syscall(SYS_write, spec->cgroup_procs[index], "0", 1) != 1) fail(error_pipe, BGTASK_LAUNCH_CGROUP);
    }
    /* Before the privileges go: lowering it may need the daemon's. */
    if (spec->change_oom_score_adj && set_oom_score_adj(spec->oom_score_adj) != 0)
        fail(error_pipe, BGTASK_LAUNCH_OOM_SCORE_ADJ);
    if (spec->change_user) {
        if (syscall(SYS_setgroups, spec->group_count, spec->groups) != 0) fail(error_pipe, BGTASK_LAUNCH_GROUPS);
        if (syscall(SYS_setresgid, spec->gid, spec->gid, spec->gid) != 0) fail(error_pipe, BGTASK_LAUNCH_GID);
        if (syscall(SYS_setresuid, spec->uid, spec->uid, spec->uid) != 0) fail(error_pipe, BGTASK_LAUNCH_UID);
    }
    set_streams(spec, &error_pipe);
    if (syscall(SYS_chdir, spec->directory) != 0) fail(error_pipe, BGTASK_LAUNCH_DIRECTORY);
    /* Every other descriptor closes on exec, the error pipe with them. */
    if (close_others_on_exec(open_file_limit) != 0) fail(error_pipe, BGTASK_LAUNCH_DESCRIPTORS);
    (void)syscall(SYS_execve, spec->path, spec->argv, spec->envp);
    fail(error_pipe, BGTASK_LAUNCH_EXEC);
}

/// A fork-like child (SIGCHLD when it exits, a copy of the parent's memory, no new stack) with a pidfd for it in
/// `*pidfd`, made by clone3, or by clone where clone3 is refused with ENOSYS: 0 in the child, its pid in the parent,
/// -1 with errno set on failure. `*call` says which call made it (or failed to).
static long clone_with_pidfd(int *pidfd, enum bgtask_clone_call *call) {
    struct bgtask_clone_args args = {0};
    args.flags = CLONE_PIDFD;
    args.pidfd = (uint64_t)(uintptr_t)pidfd;
    args.exit_signal = SIGCHLD;
    *call = BGTASK_CLONE3;
    long pid = syscall(SYS_clone3, &args, sizeof args);
    if (pid >= 0 || errno != ENOSYS) return pid;
    /* clone3 refused (a seccomp filter, or a kernel before 5.3): clone with CLONE_PIDFD, which stores the pidfd, an
       int, through the parent_tid pointer, as atomic with the fork as clone3's. The low byte of the flags is the
       exit signal; the stack is NULL, so the child runs on its copy of the parent's stack, as after fork.

       clone's argument order differs by architecture (the kernel's CONFIG_CLONE_BACKWARDS*):
       - x86_64 and the generic order (arm64, riscv, loongarch): flags, stack, parent_tid, child_tid, tls;
       - CLONE_BACKWARDS (i386, arm, powerpc, mips, arc, csky): flags, stack, parent_tid, tls, child_tid;
         parent_tid is third in both, and child_tid and tls are 0 here, so one call serves both;
       - CLONE_BACKWARDS2 (s390): stack, flags, parent_tid, child_tid, tls;
       - CLONE_BACKWARDS3 (microblaze): flags, stack, stack_size, parent_tid, child_tid, tls;
       - sparc's clone returns the parent's pid in the child too (with a flag in a second register that syscall()
         drops), so the child could not tell itself apart: no fallback there, and clone3's ENOSYS stands. */
    *call = BGTASK_CLONE;
    unsigned long flags = CLONE_PIDFD | SIGCHLD;
#if defined(__sparc__)
    (void)flags;
    errno = ENOSYS;
    return -1;
#elif defined(__s390__)
    return syscall(SYS_clone, 0UL, flags, pidfd, 0UL, 0UL);
#elif defined(__microblaze__)
    return syscall(SYS_clone, flags, 0UL, 0UL, pidfd, 0UL, 0UL);
#else
    return syscall(SYS_clone, flags, 0UL, pidfd, 0UL, 0UL);
#endif
}

pid_t bgtask_launch(const struct bgtask_launch_spec *spec, int *pidfd, enum bgtask_clone_call *call) {
    /* The descriptor limit, for the child's fallback from close_range, read here in the parent: the child may not
       call glibc's getrlimit, and lowers the limit before it needs it. The soft limit bounds every descriptor this
       process opened (the daemon raises it to the hard limit at start and never lowers it); only one inherited
       from a parent with a higher limit could lie above it. A limit past INT_MAX (RLIM_INFINITY) is cut to the
       largest descriptor number. */
    struct rlimit files;
    long open_file_limit = INT_MAX;
    if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < (rlim_t)INT_MAX) {
        open_file_limit = (long)files.rlim_cur;
    }
    int fd = -1;
    long pid = clone_with_pidfd(&fd, call);
    if (pid < 0) return -1;
    if (pid == 0) run_child(spec, open_file_limit);
    *pidfd = fd;
    return (pid_t)pid;
}
