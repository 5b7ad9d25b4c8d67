"""The job lock: one query per data directory, and a warm standby that takes over at once.

Two jobs running the query over one checkpoint would interleave their commits; Spark only
detects that within one session. So a job takes an exclusive `flock` on `<data dir>/job.lock`
before it starts its query, and holds it for its lifetime; the kernel releases it the instant
the process dies, however it dies. A second job (NAMESRV_JOB_STANDBY, or one started by
mistake) builds its SparkSession — most of a start — and then blocks on the lock, so it runs
the query the moment the active job is gone. The file holds the active job's pid, for people
and for the benchmarks' kill probe. A local lock: both jobs must run on one host.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

LOCK_FILE = "job.lock"


def acquire(data_dir: Path, on_wait: Callable[[int | None], None], *, keep_warm: Callable[[], None] | None = None,
            warm_every_s: float = 40.0) -> IO[str]:
    """Take the lock, waiting for it if another job holds it (`on_wait` is told that job's pid
    first). While waiting, `keep_warm` runs every `warm_every_s` (Spark ends Python workers idle
    for a minute; a standby keeps its own alive, so the takeover does not start them). Keep the
    returned file open for as long as the query runs."""
    data_dir.mkdir(parents=True, exist_ok=True)
    f = open(data_dir / LOCK_FILE, "a+")  # noqa: SIM115 - held for the process' lifetime
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        on_wait(holder(data_dir))
        warmed = -float("inf")
        while True:
            if keep_warm is not None and time.monotonic() - warmed >= warm_every_s:
                keep_warm()
                warmed = time.monotonic()
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                time.sleep(0.05)
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


def holder(data_dir: Path) -> int | None:
    """The pid of the job that holds (or last held) the lock."""
    try:
        text = (data_dir / LOCK_FILE).read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None
