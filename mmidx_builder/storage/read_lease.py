"""Read leases: the kernel's promise that a file stays whole while this process reads its map.

Copying straight out of a memory map is the fast way to gather many short runs of a file
(``memcpy``, no system call per run), but a page that a truncation took kills the process
with SIGBUS (mapped.py's module doc). A read lease (``fcntl(F_SETLEASE, F_RDLCK)``, Linux)
closes that window: while this process holds one, the kernel makes any process that opens
the file for writing or truncates it (``open`` with write access, ``truncate``) wait until
the lease is let go, up to ``/proc/sys/fs/lease-break-time`` seconds (45 by default), and
marks the lease as breaking meanwhile (``F_GETLEASE`` no longer says ``F_RDLCK``). So a copy
that starts after ``held`` said yes cannot meet a truncation unless it takes longer than that
whole wait, and a copy checked against ``held`` after it is done was a copy of a whole file.

A lease is only granted where the file is not open for writing anywhere, to its owner (or
root), on filesystems that support leases (not NFS): elsewhere :func:`take` says no and the
reads go through the kernel's copy as before. What a lease costs other processes: a writer
waits while a lease is let go, at most :data:`WATCH_SECONDS` when this process is not reading
the file at that moment (:class:`LeaseWatch`), else until the read in progress ends.

No signal reaches this process when a lease breaks: the break signal is set to SIGURG (whose
default action is to do nothing) before the lease is taken, and its target to nobody right
after; breaking leases are found by asking (``held``), by the next read of the file or by the
watch thread.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
import time

try:
    import fcntl
except ImportError:  # not a POSIX system: no leases
    fcntl = None

# Seconds between two looks of the watch thread at the leases it holds: the longest a writer
# waits on a file this process is not reading.
WATCH_SECONDS = 0.05
# A lease that the kernel may take back sooner than this after a break began leaves too thin a
# margin for a copy under it (a copy of a few MB takes milliseconds; a stalled disk seconds).
SHORTEST_BREAK_SECONDS = 10


def _usable() -> bool:
    """Whether leases can be used in this process (MMIDX_READ_LEASES=0 turns them off)."""
    if fcntl is None or not sys.platform.startswith("linux") or os.environ.get("MMIDX_READ_LEASES", "1") == "0":
        return False
    if not all(hasattr(fcntl, name) for name in ("F_SETLEASE", "F_GETLEASE", "F_SETSIG", "F_SETOWN")):
        return False
    try:
        with open("/proc/sys/fs/leases-enable") as f:
            enabled = f.read().strip() == "1"
        with open("/proc/sys/fs/lease-break-time") as f:
            break_seconds = int(f.read().strip())
    except (OSError, ValueError):
        return False
    return enabled and break_seconds >= SHORTEST_BREAK_SECONDS


USABLE = _usable()


def take(fd: int) -> bool:
    """Takes a read lease on the open file ``fd`` (opened read-only); False where none is
    granted (the file is open for writing somewhere, not ours, on a filesystem without leases)."""
    if not USABLE:
        return False
    try:
        fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
    except OSError as error:
        if error.errno in (errno.EAGAIN, errno.EACCES, errno.EPERM, errno.EINVAL, errno.ENOLCK, errno.EBADF):
            return False
        raise
    fcntl.fcntl(fd, fcntl.F_SETOWN, 0)  # taking the lease made this process the target
    return True


def held(fd: int) -> bool:
    """Whether the lease on ``fd`` is still held and not breaking."""
    try:
        return fcntl.fcntl(fd, fcntl.F_GETLEASE) == fcntl.F_RDLCK
    except OSError:
        return False


def release(fd: int) -> None:
    """Lets the lease on ``fd`` go: a writer waiting on it goes on."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    except OSError:
        pass  # none held (already broken by the kernel's timeout)


class LeaseWatch:
    """A daemon thread that lets go of the breaking leases of files no read is using, every
    :data:`WATCH_SECONDS`, so that a writer does not wait on a process that is not reading.
    ``lock`` guards ``in_use(file)`` (reads in progress) and ``drop(file)``, which the thread
    calls for each breaking lease; ``leased()`` lists the files holding a lease. The thread
    ends when no lease is held, and is started again (also in a forked child) by
    :meth:`ensure_running`."""

    def __init__(self, lock: threading.Lock, leased, in_use, drop):
        self._lock, self._leased, self._in_use, self._drop = lock, leased, in_use, drop
        self._thread, self._pid = None, None

    def ensure_running(self) -> None:
        """Call with ``lock`` held, after a lease was taken."""
        if self._thread is not None and self._pid == os.getpid() and self._thread.is_alive():
            return
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name="mmidx-read-leases", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        me = threading.current_thread()
        while True:
            time.sleep(WATCH_SECONDS)
            with self._lock:
                if self._thread is not me:  # replaced (a fork's child started its own)
                    return
                for file in self._leased():
                    if not self._in_use(file) and not file.lease_held():
                        self._drop(file)
                if not self._leased():
                    self._thread = None
                    return


__all__ = ["LeaseWatch", "USABLE", "WATCH_SECONDS", "held", "release", "take"]
