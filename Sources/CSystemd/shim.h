// libsystemd's public headers and one inline wrapper over sd_journal_stream_fd. The wrappers of plain Linux calls are
// in CPOSIX, which links nothing.
#ifndef BGTASK_CSYSTEMD_SHIM_H
#define BGTASK_CSYSTEMD_SHIM_H

#include <systemd/sd-bus.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-event.h>
#include <systemd/sd-journal.h>

/// A journal stream for a launched app's output (sd_journal_stream_fd), or a negative errno.
static inline int bgtask_journal_stream(const char *identifier, int priority) {
    return sd_journal_stream_fd(identifier, priority, 0);
}

#endif
