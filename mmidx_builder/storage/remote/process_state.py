"""What the remote reader keeps per process: things made once per process (event loops and
threads do not survive a fork), and whether the interpreter is exiting."""

from __future__ import annotations

import os
import threading

_LOCK = threading.Lock()
# Set when the interpreter exits: requests not yet sent are not sent. Background read-ahead
# threads are joined at exit (concurrent.futures), and without this a script that stops
# after a few samples would wait for up to read_ahead_bytes of fetches it will never use.
EXITING = threading.Event()
if hasattr(threading, "_register_atexit"):  # runs before non-daemon threads are joined (as concurrent.futures does)
    threading._register_atexit(EXITING.set)
_PER_PROCESS: dict = {}  # name -> (pid, what per_process made in that process)


def per_process(name: str, make):
    """``make()``, once per process: threads and the event loops they run do not survive a fork."""
    with _LOCK:
        pid, made = _PER_PROCESS.get(name, (None, None))
        if pid != os.getpid():
            made = make()
            _PER_PROCESS[name] = (os.getpid(), made)
        return made
