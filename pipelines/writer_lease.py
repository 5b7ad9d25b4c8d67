"""One writer at a time, across processes and hosts: leases with epochs, fenced by Delta's commit protocol.

A job instance that runs the query holds an epoch E, above every earlier one, and says so twice:

- every table the job writes carries the table property `namesrv.writerEpoch` = E. Taking over sets it
  on each table, one metadata commit per table; a commit an older writer prepared before that fails
  Delta's own conflict check ("Metadata changed since last commit"), so a writer that was paused, hung
  or cut off can never commit after its successor took over, however late it resumes;
- its lease file `<store>/leases/<E>` (the store: NAMESRV_STORE_URI, else the data directory) names
  its host, pid and process start, and its modification time is renewed every RENEW_S.

A standby takes over when the newest lease is stale (not renewed for STALE_S: its holder is paused,
hung or cut off) or names a process of this host that no longer runs (a death is seen at once). An
old writer learns that it was fenced from a lease file newer than its own: its renewal thread, its
source (before a batch is planned) and its sink (before every write) look, and the job leaves on its
own (exit code FENCED_EXIT); the launcher starts it again, as the standby. The lease files are the
only thing two jobs write in common, each its own file; creating `leases/<E>` exclusively decides
between two standbys that take over at once (on HDFS one NameNode operation, so also between two
hosts). A lease's age is its modification time against this host's clock: the hosts' clocks must
agree to well under STALE_S (NTP), as Kafka's record times already assume.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from conf import processes
from conf.store import StorePath, store_path

LEASES = "leases"
EPOCH_PROPERTY = "namesrv.writerEpoch"
RENEW_S = 0.5
# A holder silent this long is taken over: above any pause of the job's Python driver seen under a
# registration wave (its renewal is a thread of the driver), and the bulk of a takeover after a pause.
STALE_S = 5.0
FENCED_EXIT = 3
log = logging.getLogger(__name__)


class Fenced(RuntimeError):
    """A newer writer took over: this one must not write."""


def _dir(root: StorePath) -> StorePath:
    return store_path(root) / LEASES


def _epochs(root: StorePath) -> list[int]:
    try:
        return sorted(int(p.name) for p in _dir(root).iterdir() if p.name.isdigit())
    except FileNotFoundError:
        return []


def newest(root: StorePath) -> tuple[int, dict[str, Any], float] | None:
    """The newest lease: (epoch, its record, seconds since it was renewed); None when there is none."""
    for epoch in reversed(_epochs(root)):
        path = _dir(root) / str(epoch)
        try:
            record = json.loads(path.read_text() or "{}")
            age = time.time() - path.stat().st_mtime
        except (FileNotFoundError, ValueError):
            continue  # being written, or removed as old: look at the one before
        return epoch, record, age
    return None


def holder(root: StorePath) -> int | None:
    """The pid of the newest lease's holder (for people and the benchmarks' kill probe)."""
    lease = newest(root)
    return None if lease is None else lease[1].get("pid")


def process_start(pid: int) -> str | None:
    """A process' start, in clock ticks after boot (`conf.processes.process_start`), as the lease
    records it: with the pid, it names one process, not a later one given the same pid. None when
    no such process runs."""
    start = processes.process_start(pid)
    return None if start is None else str(start)


def _me() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "processStart": process_start(os.getpid())}


def vacant(lease: tuple[int, dict[str, Any], float] | None) -> bool:
    """Whether a lease can be taken over: none, stale, or its holder (on this host) is gone."""
    if lease is None:
        return True
    _, record, age = lease
    if age > STALE_S:
        return True
    if record.get("host") == socket.gethostname() and record.get("pid") is not None:
        return process_start(int(record["pid"])) != record.get("processStart")
    return False


@dataclass
class Lease:
    root: StorePath  # where `leases/` is: the store's root
    epoch: int

    @property
    def path(self) -> StorePath:
        return _dir(self.root) / str(self.epoch)

    def fenced_by(self) -> int | None:
        """The epoch of a newer writer, if one took over."""
        newer = [e for e in _epochs(self.root) if e > self.epoch]
        return max(newer) if newer else None

    def check(self) -> None:
        """Raise Fenced when a newer writer took over (called before every write)."""
        newer = self.fenced_by()
        if newer is not None:
            raise Fenced(f"writer epoch {self.epoch} was taken over by epoch {newer}; it writes nothing more")

    def renew(self) -> None:
        self.path.touch()

    def keep(self, on_fenced: Callable[[int], None], stop: threading.Event) -> threading.Thread:
        """Renew every RENEW_S from a daemon thread; `on_fenced(newer epoch)` once fenced (it does not
        renew then: the successor's lease is the live one)."""
        def run() -> None:
            while not stop.wait(RENEW_S):
                try:
                    newer = self.fenced_by()
                    if newer is None:
                        self.renew()
                except Exception as exc:  # the store is unreachable: the successor may take over
                    log.warning("lease %s not renewed: %s", self.path, exc)
                    continue
                if newer is not None:
                    on_fenced(newer)
                    return
        t = threading.Thread(target=run, name="writer-lease", daemon=True)
        t.start()
        return t


def table_epoch(properties: dict[str, str]) -> int:
    raw = properties.get(EPOCH_PROPERTY, "")
    return int(raw) if raw.isdigit() else 0


def take(root: StorePath, table_paths: Iterable[str]) -> Lease | None:
    """Take the writer's role now: the next epoch's lease file, created exclusively (None: another
    standby took it first), then the epoch on every existing table, which fences the old writer's
    commits. Tables created later get it from `DeltaSink.ensure_tables`."""
    from deltalake import DeltaTable
    paths = [p for p in table_paths if DeltaTable.is_deltatable(p)]
    tables = [DeltaTable(p) for p in paths]
    epoch = max([0, *_epochs(root), *(table_epoch(dt.metadata().configuration) for dt in tables)]) + 1
    _dir(root).mkdir(parents=True, exist_ok=True)
    try:
        with (_dir(root) / str(epoch)).open("x") as f:
            f.write(json.dumps({**_me(), "takenAt": int(time.time() * 1000)}))
    except FileExistsError:
        return None
    # One metadata commit per table, side by side (delta-rs lets go of the GIL): one after another
    # they were most of a standby's half-second takeover of the lease.
    with ThreadPoolExecutor(max_workers=len(tables) or 1) as pool:
        list(pool.map(lambda dt: dt.alter.set_table_properties({EPOCH_PROPERTY: str(epoch)},
                                                                raise_if_not_exists=False), tables))
    for old in _epochs(root):
        if old < epoch - 1:  # the previous one stays for people (who held it); older ones go
            (_dir(root) / str(old)).unlink(missing_ok=True)
    return Lease(store_path(root), epoch)


def _quietly(warm: Callable[[], None]) -> None:
    try:
        warm()
    except Exception as exc:  # a warm-up is a courtesy: the takeover does not depend on it
        log.warning("standby warm-up failed: %s", exc)


def acquire(root: StorePath, table_paths: Callable[[], Iterable[str]], on_wait: Callable[[int | None], None], *,
            keep_warm: Callable[[], None] | None = None, warm_every_s: float = 40.0, poll_s: float = 0.05) -> Lease:
    """Take the writer's role, waiting while a live writer holds it (`on_wait` is told its pid first).
    While waiting, `keep_warm` runs every `warm_every_s` (Spark ends Python workers idle for a minute;
    a standby keeps its own alive, so the takeover does not start them), on a thread of its own: a
    warm-up that waits (a cluster with no cores free for the standby) must not hold the takeover up."""
    told = False
    warmed = -float("inf")
    warming: threading.Thread | None = None
    while True:
        lease = newest(root)
        if vacant(lease):
            taken = take(root, table_paths())
            if taken is not None:
                return taken
            continue
        if not told:
            on_wait(None if lease is None else lease[1].get("pid"))
            told = True
        if keep_warm is not None and time.monotonic() - warmed >= warm_every_s \
                and (warming is None or not warming.is_alive()):
            warming = threading.Thread(target=_quietly, args=(keep_warm,), name="standby-warm-up", daemon=True)
            warming.start()
            warmed = time.monotonic()
        time.sleep(poll_s)
