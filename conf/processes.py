"""Telling one process from a later one given the same pid, on this host (/proc): the writer's
lease and the cut builder's status both name their holder by pid and start."""

from __future__ import annotations

import os
from pathlib import Path


def process_start(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (/proc/<pid>/stat's 22nd field; None
    where there is no /proc, or no such process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def process_alive(pid: int, started: int | None) -> bool:
    """Whether process `pid` (started at `started`, `process_start`'s; None: not known) runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: it exists
        pass
    if started is None:
        return True
    now = process_start(pid)
    return now is None or now == started
