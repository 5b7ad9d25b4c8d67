"""The kernel's word that a file was replaced or rewritten (Linux inotify), so that a refresher
sleeps until the job or the cut builder writes instead of looking at the files on a timer.

Each serving process, the front and the cut builder looked at the job's progress record (and the
host's cut file) every 20 ms while the job ran batches and re-read them every refresh interval
(200 ms): a wake-up costs about 0.1 ms of CPU with its stat calls, and those timers were a fifth
of the system's CPU under a quiet 1,000-broker fleet and most of what an idle system spent
(docs/scaling.md). A watch costs nothing while nothing is written, and wakes the refresher as
soon as a rename lands, rather than up to 20 ms later.

Only local directories can be watched (HDFS has no such notice): a store on HDFS keeps its timers.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import select
import struct
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

log = logging.getLogger(__name__)

# <sys/inotify.h>
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_TO = 0x00000080
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
# A file is replaced by a rename over it (schemas.progress, snapshots.cutfile), written in place
# and closed, or removed: each may change what a reader serves. A watched directory itself removed
# or moved away (a warehouse restored from a backup) ends its watch: the watch is then `broken`.
MASK = IN_CLOSE_WRITE | IN_MOVED_TO | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
_ENDED = IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of NUL-padded name)


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library's inotify calls, from the symbols the process has loaded already: no
    `ctypes.util.find_library`, which runs `ldconfig -p` in a child process on every call (a
    store retries its watch at each look while its directory is missing)."""
    return ctypes.CDLL(None, use_errno=True)


class FileWatch:
    """Calls `changed()`, on a thread of its own, each time one of `files` is renamed over, written
    and closed, or removed (events that arrive together call it once), and when a watched directory
    is removed or moved away, after which the watch is `broken` (its owner makes a new one over the
    directory now at that path). Raises OSError when the kernel cannot watch a file's directory
    (none there, not Linux, out of watches)."""

    def __init__(self, files: Iterable[Path], changed: Callable[[], None]) -> None:
        libc = _libc()
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1: {os.strerror(err)}")
        self._fd = fd
        self._names: dict[int, frozenset[str]] = {}
        by_dir: dict[Path, set[str]] = {}
        for f in files:
            by_dir.setdefault(f.parent, set()).add(f.name)
        for directory, names in by_dir.items():
            wd = libc.inotify_add_watch(fd, os.fsencode(directory), MASK)
            if wd < 0:
                err = ctypes.get_errno()
                os.close(fd)
                raise OSError(err, f"inotify_add_watch {directory}: {os.strerror(err)}")
            self._names[wd] = frozenset(names)
        self.broken = False
        self._stop_r, self._stop_w = os.pipe()
        self._changed = changed
        self._thread = threading.Thread(target=self._run, name="file-watch", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the watching thread and give the descriptors back."""
        if self._stop_w < 0:
            return
        os.write(self._stop_w, b"x")
        self._thread.join(5)
        for fd in (self._fd, self._stop_r, self._stop_w):
            os.close(fd)
        self._stop_w = -1

    def _run(self) -> None:
        while True:
            ready, _, _ = select.select([self._fd, self._stop_r], [], [])
            if self._stop_r in ready:
                return
            try:
                data = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                continue
            if self._watched(data):
                try:
                    self._changed()
                except Exception:  # the caller's; the watch goes on
                    log.exception("a file watch's callback failed")

    def _watched(self, data: bytes) -> bool:
        """Whether any event in `data` names a watched file, says events were lost, or ends a
        directory's watch (which also marks the watch `broken`)."""
        at = 0
        hit = False
        while at + _EVENT.size <= len(data):
            wd, mask, _, length = _EVENT.unpack_from(data, at)
            name = data[at + _EVENT.size:at + _EVENT.size + length].rstrip(b"\0").decode("utf-8", "replace")
            at += _EVENT.size + length
            if mask & _ENDED and not name:
                self.broken = True
            hit = hit or bool(mask & (IN_Q_OVERFLOW | _ENDED)) or name in self._names.get(wd, ())
        return hit
