// The launcher of managed apps: a fork-like child that joins the app's cgroups, drops privileges, sets up its
// standard streams and execs, with raw system calls only, and reports a failure before exec through a pipe.
#ifndef BGTASK_CLAUNCHER_LAUNCH_H
#define BGTASK_CLAUNCHER_LAUNCH_H

#include <sys/types.h>

/// What `bgtask_launch` starts, and how the child is set up before `execve`.
struct bgtask_launch_spec {
    /// The program's absolute path (looked up by the caller: the child calls nothing that allocates).
    const char *path;
    char *const *argv;
    char *const *envp;
    /// Open, writable `cgroup.procs` files the child moves itself into ("0"), before it drops privileges.
    const int *cgroup_procs;
    int cgroup_count;
    /// Descriptors for the child's standard input, output and error: any descriptors, 0, 1 and 2 among them, one
    /// descriptor for several streams too.
    int standard_input, standard_output, standard_error;
    /// Non-zero: switch to `uid`, `gid` and the supplementary `groups` (root only).
    int change_user;
    uid_t uid;
    gid_t gid;
    const gid_t *groups;
    int group_count;
    /// The working directory.
    const char *directory;
    /// Non-zero: the child sets its `oom_score_adj` (/proc/self/oom_score_adj) to `oom_score_adj` before it drops
    /// privileges. Where the kernel refuses to lower it that far (below the floor the child inherited, without
    /// CAP_SYS_RESOURCE), the child takes the nearest value the kernel allows, between the one asked for and the
    /// one it inherited, rather than keep the daemon's. Any other failure fails the launch.
    int change_oom_score_adj;
    int oom_score_adj;
    /// The write end of a close-on-exec pipe: on failure the child writes { step, errno } there and exits 127.
    int error_pipe;
};

/// Where a launch failed in the child, as written to `error_pipe`.
enum bgtask_launch_step {
    BGTASK_LAUNCH_SIGNALS = 1,
    BGTASK_LAUNCH_SESSION = 2,
    BGTASK_LAUNCH_CGROUP = 3,
    BGTASK_LAUNCH_GROUPS = 4,
    BGTASK_LAUNCH_GID = 5,
    BGTASK_LAUNCH_UID = 6,
    BGTASK_LAUNCH_STREAMS = 7,
    BGTASK_LAUNCH_DIRECTORY = 8,
    BGTASK_LAUNCH_EXEC = 9,
    /// Marking every descriptor but 0, 1 and 2 close-on-exec (close_range, or one by one where it fails).
    BGTASK_LAUNCH_DESCRIPTORS = 10,
    /// Writing `oom_score_adj`.
    BGTASK_LAUNCH_OOM_SCORE_ADJ = 11,
};

/// The system call that made the child, or failed to.
enum bgtask_clone_call {
    /// clone3 (Linux 5.3).
    BGTASK_CLONE3 = 1,
    /// clone with CLONE_PIDFD (Linux 5.2), after clone3 was refused with ENOSYS. A seccomp filter refuses clone3 that
    /// way when it must inspect the flags, which clone3 passes behind a pointer (systemd's RestrictNamespaces=).
    BGTASK_CLONE = 2,
};

/// Starts `spec->path` in a new session, in the given cgroups, as the given user, and returns its pid with a pidfd
/// in `*pidfd` (CLONE_PIDFD: no window in which the pid could name another process), or -1 with errno set; `*call`
/// says which system call made the child (or failed to): clone3, or clone where clone3 is refused.
///
/// The child runs fork-like on a copy of the parent's memory with one thread. glibc does not know it forked (no
/// atfork handlers ran), so the child makes raw system calls only and allocates nothing: glibc's set*id wrappers
/// would try to reach the parent's other threads, and its heap may be locked by one of them. Whether exec succeeded
/// is for the caller to read from the error pipe (end of file: it did).
pid_t bgtask_launch(const struct bgtask_launch_spec *spec, int *pidfd, enum bgtask_clone_call *call);

#endif
