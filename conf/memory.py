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
import gc
import logging

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
