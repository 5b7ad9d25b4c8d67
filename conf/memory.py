"""Giving memory back to the OS after large batches or loads.

A registration wave (thousands of groups × hundreds of topics) briefly needs hundreds of MB of
Python objects and Arrow buffers in the driver and the Python workers, and a serving process
loads a million queue rows when topic_queue changes; glibc and Arrow's pool keep those pages
afterwards, so RSS would stay at the peak forever. Called after a batch, a run of step calls
or a snapshot load that handled much data, never per request.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

_libc = None


def release_memory(*, collect: bool = True) -> None:
    """`collect` False: no full garbage collection first. A serving process holds the GIL for a
    whole collection of every object it tracks (a 100,000-broker front: about half a second per
    cut), and its cuts hold no cycles: refcounting frees an old cut, so only the pools' and
    malloc's free pages are worth giving back."""
    global _libc
    if collect:
        gc.collect()
    try:
        import pyarrow as pa
        pa.default_memory_pool().release_unused()
    except Exception:  # an Arrow build without the call: nothing to release there
        pass
    if _libc is None:
        name = ctypes.util.find_library("c")
        _libc = ctypes.CDLL(name) if name else False
    if isinstance(_libc, ctypes.CDLL) and hasattr(_libc, "malloc_trim"):
        _libc.malloc_trim(0)


class ReleaseAfter:
    """Counts bytes handled; releases memory each time `threshold` more have gone through."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self.seen = 0

    def add(self, nbytes: int) -> None:
        self.seen += nbytes
        if self.seen >= self.threshold:
            self.seen = 0
            release_memory()


# ReleaseEvery's release: no garbage collection first (`release_memory`'s `collect`)
_RELEASE_UNCOLLECTED: Callable[[], None] = functools.partial(release_memory, collect=False)


class ReleaseEvery:
    """Gives memory back at most once every `seconds` (`release`), or at once (`release_now`).

    A serving process swaps cuts every few seconds during a registration wave, and each release
    walks malloc's arenas while the other threads' allocations wait (`snapshots.store`), so a
    caller that would release after each swap releases after one of them every `seconds`. The
    first `release` does release (the last one is at minus infinity). `clock` and `release`
    are the monotonic clock and `release_memory(collect=False)` (no garbage collection: a serving
    process's cuts hold no cycles, and a collection holds the GIL for the whole heap's walk); a
    test passes its own."""

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.monotonic,
                 release: Callable[[], None] = _RELEASE_UNCOLLECTED) -> None:
        self.seconds = seconds
        self._clock = clock
        self._release = release
        self._last = float("-inf")

    def release(self) -> bool:
        """Release when `seconds` have passed since the last release; True when it did. Last in
        an `and` of conditions, so that a cheap condition that fails spares the clock's read."""
        if self._clock() - self._last < self.seconds:
            return False
        self.release_now()
        return True

    def release_now(self) -> None:
        """Release whatever the time; the next `release` waits `seconds` from now."""
        self._last = self._clock()
        self._release()
