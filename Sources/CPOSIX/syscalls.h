// Inline wrappers for the Linux calls Swift cannot reach from Glibc, with nothing of libsystemd.
//
// Swift's Glibc module is built without _GNU_SOURCE, so GNU-only names (struct ucred, POSIX_SPAWN_SETSID,
// the *_np spawn actions) are invisible, and variadic syscall() cannot be called at all. Every wrapper
// here is a direct pass-through: it returns what the kernel or libc returned, with errno left as set.
#ifndef BGTASK_CPOSIX_SYSCALLS_H
#define BGTASK_CPOSIX_SYSCALLS_H

#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <spawn.h>
#include <stddef.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/netlink.h>

// Syscall numbers, for headers older than the kernel (they are the same on every architecture since 5.1's
// unified syscall table).
#ifndef __NR_pidfd_send_signal
#define __NR_pidfd_send_signal 424
#endif
#ifndef __NR_pidfd_open
#define __NR_pidfd_open 434
#endif
#ifndef __NR_process_mrelease
#define __NR_process_mrelease 448
#endif

/// POSIX_SPAWN_SETSID (glibc 2.26, GNU extension): the child calls setsid().
#define BGTASK_POSIX_SPAWN_SETSID 0x80

/// POLLRDHUP / EPOLLRDHUP (GNU extension): the peer closed its writing half.
#define BGTASK_POLLRDHUP 0x2000

/// SO_PEERPIDFD (Linux 6.5): a pidfd for the process that created the peer socket.
#define BGTASK_SO_PEERPIDFD 77

/// SO_PEERCRED: struct ucred of the peer, fixed when it connected.
#define BGTASK_SO_PEERCRED 17

/// P_PIDFD (Linux 5.4): waitid() selects the child by a pidfd.
#define BGTASK_P_PIDFD 3

/// statfs(2)'s filesystem type of `path` (such as CGROUP2_SUPER_MAGIC), or -1 with errno set. <sys/statfs.h> is
/// not part of Swift's Glibc module.
static inline long bgtask_filesystem_type(const char *path) {
    struct statfs info;
    if (statfs(path, &info) != 0) return -1;
    return (long)info.f_type;
}

/// eventfd(2) with EFD_CLOEXEC, non-blocking when asked: a counter one thread adds to and another reads (and
/// polls) to learn that work is waiting. <sys/eventfd.h> is not part of Swift's Glibc module.
static inline int bgtask_eventfd(int non_blocking) {
    return eventfd(0, EFD_CLOEXEC | (non_blocking ? EFD_NONBLOCK : 0));
}

/// prctl(PR_SET_NAME): names the calling thread (15 bytes at most, as `top -H` and /proc/PID/task/TID/comm
/// show it). prctl is variadic, so Swift cannot call it.
static inline int bgtask_set_thread_name(const char *name) {
    return prctl(PR_SET_NAME, (unsigned long)name, 0UL, 0UL, 0UL);
}

/// pidfd_open(2): a descriptor that refers to the process `pid` for as long as it is open.
static inline int bgtask_pidfd_open(pid_t pid, unsigned int flags) {
    return (int)syscall(__NR_pidfd_open, pid, flags);
}

/// pidfd_send_signal(2) with no siginfo: signals the process the pidfd refers to, never a reused PID.
static inline int bgtask_pidfd_send_signal(int pidfd, int signal_number, unsigned int flags) {
    return (int)syscall(__NR_pidfd_send_signal, pidfd, signal_number, NULL, flags);
}

/// process_mrelease(2): reaps the address space of a process that is already dying (after SIGKILL).
static inline int bgtask_process_mrelease(int pidfd, unsigned int flags) {
    return (int)syscall(__NR_process_mrelease, pidfd, flags);
}

/// sched_getaffinity(2), the system call itself: writes the CPUs thread `tid` (0: the caller) may run on into `mask`,
/// a bit per CPU in `words` unsigned longs, and returns how many bytes the kernel wrote (the rest is left as it was),
/// or -1 with errno set (EINVAL when the mask is smaller than the kernel's). glibc's wrapper and cpu_set_t are GNU
/// only.
static inline long bgtask_sched_getaffinity(pid_t tid, size_t words, unsigned long *mask) {
    return syscall(__NR_sched_getaffinity, tid, words * sizeof(unsigned long), mask);
}

/// sched_setaffinity(2), the system call itself: lets thread `tid` (0: the caller) run only on the CPUs set in
/// `mask`, a bit per CPU in `words` unsigned longs; 0, or -1 with errno set.
static inline int bgtask_sched_setaffinity(pid_t tid, size_t words, const unsigned long *mask) {
    return (int)syscall(__NR_sched_setaffinity, tid, words * sizeof(unsigned long), mask);
}

/// waitid(P_PIDFD, pidfd, ...) returning the siginfo fields Swift cannot reach through the union.
///
/// `*pid` is 0 when WNOHANG was given and the child has not changed state yet.
static inline int bgtask_waitid_pidfd(int pidfd, int options, int *code, int *status, pid_t *pid) {
    siginfo_t info;
    info.si_pid = 0;
    info.si_code = 0;
    info.si_status = 0;
    int result = waitid((idtype_t)BGTASK_P_PIDFD, (id_t)pidfd, &info, options);
    if (result == 0) {
        *code = info.si_code;
        *status = info.si_status;
        *pid = info.si_pid;
    }
    return result;
}

/// The layout of struct ucred (<bits/socket.h>, GNU only): three 32-bit ids in this order.
struct bgtask_peer_credentials {
    pid_t pid;
    uid_t uid;
    gid_t gid;
};

/// getsockopt(SO_PEERCRED): the pid, uid and gid of the peer as of connect() or socketpair().
static inline int bgtask_peer_credentials(int fd, pid_t *pid, uid_t *uid, gid_t *gid) {
    struct bgtask_peer_credentials credentials;
    socklen_t length = sizeof(credentials);
    int result = getsockopt(fd, SOL_SOCKET, BGTASK_SO_PEERCRED, &credentials, &length);
    if (result == 0) {
        if (length != sizeof(credentials)) {
            errno = EPROTO;
            return -1;
        }
        *pid = credentials.pid;
        *uid = credentials.uid;
        *gid = credentials.gid;
    }
    return result;
}

/// getsockopt(SO_PEERPIDFD): a new pidfd (close-on-exec) for the peer, or -1 with errno (ENOPROTOOPT before 6.5).
static inline int bgtask_peer_pidfd(int fd) {
    int pidfd = -1;
    socklen_t length = sizeof(pidfd);
    if (getsockopt(fd, SOL_SOCKET, BGTASK_SO_PEERPIDFD, &pidfd, &length) != 0) {
        return -1;
    }
    return pidfd;
}

/// A netlink socket of `protocol` (NETLINK_ROUTE, NETLINK_KOBJECT_UEVENT), close-on-exec and non-blocking, bound to
/// the multicast `groups` (a bit mask; 0 for none) with an address the kernel picks; the descriptor, or -1 with errno
/// set. `struct sockaddr_nl` is not part of Swift's Glibc module.
static inline int bgtask_netlink_open(int protocol, unsigned int groups, int receive_buffer_bytes) {
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, protocol);
    if (fd < 0) return -1;
    if (receive_buffer_bytes > 0) {
        // Only a bigger buffer against bursts: failing leaves the default, which works.
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer_bytes, sizeof(receive_buffer_bytes));
    }
    struct sockaddr_nl address;
    memset(&address, 0, sizeof(address));
    address.nl_family = AF_NETLINK;
    address.nl_groups = groups;
    if (bind(fd, (struct sockaddr *)&address, sizeof(address)) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

/// Receives one netlink datagram into `buffer`: its length, or -1 with errno set. `*sender_port` is the sender's
/// port id (0: the kernel), `*groups` the multicast groups it was sent to, and `*truncated` 1 when the datagram was
/// longer than the buffer (the rest is lost).
static inline long bgtask_netlink_receive(
    int fd, void *buffer, size_t length, unsigned int *sender_port, unsigned int *groups, int *truncated) {
    struct sockaddr_nl address;
    memset(&address, 0, sizeof(address));
    struct iovec vector = {buffer, length};
    struct msghdr message;
    memset(&message, 0, sizeof(message));
    message.msg_name = &address;
    message.msg_namelen = sizeof(address);
    message.msg_iov = &vector;
    message.msg_iovlen = 1;
    long received = recvmsg(fd, &message, 0);
    if (received < 0) return -1;
    *sender_port = address.nl_pid;
    *groups = address.nl_groups;
    *truncated = (message.msg_flags & MSG_TRUNC) ? 1 : 0;
    return received;
}

/// Sends `buffer` to the kernel (port 0) on netlink socket `fd`: the bytes sent, or -1 with errno set.
static inline long bgtask_netlink_send_to_kernel(int fd, const void *buffer, size_t length) {
    struct sockaddr_nl address;
    memset(&address, 0, sizeof(address));
    address.nl_family = AF_NETLINK;
    return sendto(fd, buffer, length, 0, (struct sockaddr *)&address, sizeof(address));
}

// GNU descriptor calls, redeclared because the headers hide them without _GNU_SOURCE.
extern int pipe2(int fds[2], int flags);
extern int accept4(int fd, struct sockaddr *address, socklen_t *length, int flags);

// GNU spawn file actions (glibc 2.29 and 2.34); redeclared because spawn.h hides them without _GNU_SOURCE.
extern int posix_spawn_file_actions_addchdir_np(posix_spawn_file_actions_t *actions, const char *path);
extern int posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *actions, int from);

/// Adds "chdir(path)" to the child's file actions; returns an error number like the other spawn calls.
static inline int bgtask_spawn_add_chdir(posix_spawn_file_actions_t *actions, const char *path) {
    return posix_spawn_file_actions_addchdir_np(actions, path);
}

/// Adds "close every descriptor >= from" to the child's file actions; returns an error number.
static inline int bgtask_spawn_add_close_from(posix_spawn_file_actions_t *actions, int from) {
    return posix_spawn_file_actions_addclosefrom_np(actions, from);
}

/// mallopt(M_MMAP_THRESHOLD): blocks of at least `bytes` are mapped on their own and unmapped when freed. Setting it
/// also stops glibc from raising the threshold after the first such free, which keeps later large blocks in the
/// heap for good.
static inline int bgtask_set_mmap_threshold(int bytes) {
    return mallopt(M_MMAP_THRESHOLD, bytes);
}

/// Arms `fd`, a CLOCK_REALTIME timerfd, to report the next setting of the wall clock: an absolute expiry far in the
/// future (year 36,000; the kernel saturates it) with TFD_TIMER_CANCEL_ON_SET, so a read fails with ECANCELED once
/// the clock is set (settimeofday, clock_settime, an NTP step) and never returns an expiry. 0, or -1 with errno.
static inline int bgtask_clock_set_arm(int fd) {
    struct itimerspec when;
    memset(&when, 0, sizeof when);
    when.it_value.tv_sec = (time_t)1 << 40;
    return timerfd_settime(fd, TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET, &when, NULL);
}

/// A non-blocking, close-on-exec CLOCK_REALTIME timerfd armed by `bgtask_clock_set_arm`, or -1 with errno.
static inline int bgtask_clock_set_watch(void) {
    int fd = timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC);
    if (fd < 0) return -1;
    if (bgtask_clock_set_arm(fd) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

#endif
