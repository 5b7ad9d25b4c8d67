"""`python -m snapshots.cutbuilder`: the host's one writer of the shared cut file (issue 36).

Every serving process on a host maps one file of pre-encoded answers (`snapshots.cutfile`)
instead of loading the cut from Delta itself; this process is what keeps that file the newest
cut's. It watches the job's progress record and the `snapshots` table through a `SnapshotStore`
(the serving processes' own watch, so a cut reaches the file as fast as it used to reach them),
and after each refresh that brought a cut the file does not hold, writes the cut again,
incrementally against the one it replaces: a new index part (`cuts/index-<hex>.idx`) only when the
routes changed, then the head, renamed atomically over `<data dir>/cuts/current.cut`.

Old index parts are this process's to remove: after each write it removes every index part of the
directory but the one the new head names and the last other one a head named before it (a reader
may be between reading that head and opening its part), so at most two stay at rest, three while a
new one is written (`cutfile.prune_index_parts`; the format's docstring says why removing a part a
reader maps is harmless).

One builder per host: a builder holds an exclusive lock on `<data dir>/cuts/builder.lock` for its
life, so a second one (a restart racing the old process's exit, or an in-process builder of a
standalone server, `InProcessBuilder`) waits for the lock instead of writing beside it. The launcher starts this
process once per serving host, before the serving processes, and restarts it if it dies; while
it is down the serving processes keep answering from the last file.

The builder says how it fares in `<data dir>/cuts/builder.json` (`StatusFile`, renamed atomically
over the last): its pid, the last cut it wrote and when, and its failures since (to read the
job's cuts or to write the file), rewritten on each new cut and each failure, never on an idle
refresh. A serving store whose cut is behind the job's, or that finds no file, reads it to say in
its readiness that the builder failed, and why, or that it is not running.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from conf import Config, heapdump, load_config
from conf.imports import refuse_pandas
from conf.logs import setup_logging
from conf.memory import release_memory
from conf.processes import process_start
from conf.version import argument_parser
from routeinfo.snapshot import Snapshot
from schemas.metrics import SnapshotMetrics
from snapshots.cutfile import CutFile, CutFileError, CutFileStats, index_part_named_by, prune_index_parts, write_cut
from snapshots.freshness import STATUS_FILE, BuilderStatus
from snapshots.reader import SnapshotReader
from snapshots.store import SnapshotStore, read_builder_status

log = logging.getLogger("namesrv.cutbuilder")
CUTS_DIR = "cuts"
CUT_FILE = "current.cut"
LOCK_FILE = "builder.lock"


def cut_dir(cfg: Config) -> Path:
    """Where a host's cut file lives: on the host's own disk (the data directory), never the
    shared store, since every process that maps it runs here."""
    return cfg.data_dir / CUTS_DIR


def cut_path(cfg: Config) -> Path:
    return cut_dir(cfg) / CUT_FILE


def status_path(cfg: Config) -> Path:
    return cut_dir(cfg) / STATUS_FILE


# How a builder writes a cut's file: `cutfile.write_cut` (a test gives one that fails).
CutWriter = Callable[[Snapshot, Path, "CutFile | Path | None"], CutFileStats]


class StatusFile:
    """The builder's status (`freshness.BuilderStatus`) at `path`, rewritten (a temporary file
    renamed over it) on each change. Only the holder of the host's lock writes it. A builder that
    takes over from a dead one carries on its last cut and its failures."""

    def __init__(self, path: Path) -> None:
        self.path = path
        now, pid = _now_ms(), os.getpid()
        prior = read_builder_status(path)
        self.status = BuilderStatus(pid, process_start(pid), now, now) if prior is None else \
            prior.restarted(pid, process_start(pid), now)
        self._write()

    def succeeded(self, snapshot_id: int | None, *, wrote: bool) -> None:
        """The file holds the newest cut (`wrote`: written now); nothing to write on an idle refresh."""
        if wrote or self.status.failure is not None:
            self.status = self.status.succeeded(snapshot_id, _now_ms(), wrote=wrote)
            self._write()

    def failed(self, message: str) -> None:
        self.status = self.status.failed(message, _now_ms())
        self._write()

    def _write(self) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        try:
            tmp.write_text(json.dumps(self.status.to_json()))
            os.replace(tmp, self.path)
        except OSError as exc:  # a full disk, say: the serving processes read the last status
            log.warning("the cut builder's status %s could not be written: %s", self.path, exc)
            tmp.unlink(missing_ok=True)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class BuilderLock:
    """The exclusive lock that makes a builder the host's only one; released when its holder
    closes it or exits (the kernel drops an flock with the last descriptor)."""

    path: Path
    handle: IO[bytes]

    @classmethod
    def acquire(cls, directory: Path, *, wait: bool) -> BuilderLock | None:
        """The lock, or None when another builder holds it and `wait` is False."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / LOCK_FILE
        handle = path.open("ab")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            handle.close()
            return None
        except BaseException:
            handle.close()
            raise
        handle.truncate(0)
        handle.write(f"{os.getpid()}\n".encode())
        handle.flush()
        return cls(path, handle)

    def release(self) -> None:
        self.handle.close()


class CutBuilder:
    """Writes the store's cut to the file after every refresh that brought one the file lacks.

    Called on the store's refresher thread (`SnapshotStore.add_listener`): a write delays the
    next refresh, so cuts committed faster than they are written are coalesced into the newest,
    which is what serving wants. A failed write is logged and tried again after the next
    refresh, new cut or not. With a `status`, each new cut and each failure is told there, a failure
    of the followed store too (`source_error`: why its last refresh failed, None when it did not)."""

    def __init__(self, path: Path, *, status: StatusFile | None = None, write: CutWriter = write_cut,
                 source_error: Callable[[], str | None] = lambda: None) -> None:
        self.path = path
        self.status = status
        self._write_cut = write
        self._source_error = source_error
        self.last: CutFileStats | None = None
        self.last_error: str | None = None
        self._written: CutFile | None = None
        self._lock = threading.Lock()
        self._known = False  # whether `_held` says what the file at `path` holds
        self._held: int | None = None  # the snapshot id it holds (None: the empty cut)
        self._parts: list[str] = []  # the index parts to keep: the newest head's, then the last other one named

    def _file_holds(self) -> tuple[bool, int | None]:
        """Whether a sound file is at `path` already (a builder's restart), and its cut's id: checked
        whole (its CRC-32), since a file kept here is what every serving process maps."""
        try:
            with CutFile.open(self.path) as f:
                return True, f.snapshot_id
        except (OSError, CutFileError):
            return False, None

    def __call__(self, snap: Snapshot, swapped: bool) -> None:
        with self._lock:
            failed = self._source_error()
            if failed is not None:  # the store kept its last cut: the file may well hold it, not the newest
                if self.status is not None:
                    self.status.failed(f"reading the job's cuts: {failed}")
                return
            if not self._known:
                self._known, self._held = self._file_holds()
            if self._known and (self._held == snap.snapshot_id or snap.snapshot_id is None):
                if self.status is not None:  # the file has this cut, or a real one where this store has none yet
                    self.status.succeeded(self._held, wrote=False)
                return
            self._write(snap)

    def _write(self, snap: Snapshot) -> None:
        previous: CutFile | Path | None = self._written
        if previous is None and self.path.exists():
            previous = self.path
        if not self._parts:  # a builder's first write: the part the head it replaces names is the one kept
            before = self._written.index_path.name if self._written is not None else index_part_named_by(self.path)
            self._parts = [] if before is None else [before]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            stats = self._write_cut(snap, self.path, previous)
            # ours: the next write's `previous`, sharing the last one's index part when the routes did not change
            written = CutFile.open(self.path, verify=False, reuse=self._written)
            written.written_from = snap  # what the next cut has the same as this one is not hashed or encoded again
        except Exception as exc:  # kept serving the old file; tried again after the next refresh
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.error("writing the cut file of snapshot %s failed: %s", snap.snapshot_id, self.last_error)
            if self.status is not None:
                self.status.failed(self.last_error)
            return
        if self._written is not None:
            self._written.close()
        self._written, self._known, self._held = written, True, snap.snapshot_id
        self.last, self.last_error = stats, None
        removed = self._prune(written.index_path.name)
        # the write's transient buffers (encoding, hashing, the JSON of the head), given back: about
        # 10 ms, and at 10,000 × 100 the builder kept 160 MiB freed but not returned (conf/heapdump)
        release_memory(collect=False)
        if self.status is not None:
            self.status.succeeded(snap.snapshot_id, wrote=True)
        log.info("cut %s written to %s: %d topics, %d bodies, head %.1f MiB, index part %s %s (%.1f MiB), reused %s, "
                 "%.2f s (%.2f s CPU)%s%s", snap.snapshot_id, self.path, stats.topics, stats.bodies,
                 stats.file_bytes / 2**20, stats.index_path.name, "written" if stats.index_written else "kept",
                 stats.index_bytes / 2**20, stats.reused, stats.seconds, stats.cpu_seconds,
                 f"; previous file not used: {stats.previous_refused}" if stats.previous_refused else "",
                 f"; removed {len(removed)} old index part(s)" if removed else "")

    def _prune(self, newest: str) -> list[str]:
        """Remove the index parts but the newest head's and the last other one a head named (the
        module's docstring); a failure to is logged, the cut is written all the same."""
        if not self._parts or self._parts[0] != newest:
            self._parts = [newest, *self._parts[:1]]
        try:
            return prune_index_parts(self.path.parent, self._parts)
        except OSError as exc:
            log.warning("old index parts in %s could not be removed: %s", self.path.parent, exc)
            return []

    def close(self) -> None:
        with self._lock:
            if self._written is not None:
                self._written.close()
                self._written = None


def following(cfg: Config, write: CutWriter = write_cut) -> tuple[SnapshotStore, CutBuilder]:
    """A builder and the Delta-reading store it follows the job through (the serving processes'
    watch), the builder called after each of the store's refreshes and telling how it fares in
    the host's status file (call it holding the host's lock)."""
    store = SnapshotStore(SnapshotReader(cfg.warehouse), cfg.refresh_interval_ms / 1000,
                          retention_ms=cfg.history_retention_ms)
    builder = CutBuilder(cut_path(cfg), status=StatusFile(status_path(cfg)), write=write,
                         source_error=lambda: store.last_error)
    store.add_listener(builder)
    return store, builder


class InProcessBuilder:
    """A builder inside a serving process whose host has none (a server run without the launcher,
    the tests' in-process servers): no thread of its own; the serving store's refresher runs it
    before each look at the file (`SnapshotStore(builder=...)`), so the file is the newest cut's by
    the time the store maps it. Holds the host's lock, taken without waiting."""

    def __init__(self, cfg: Config, lock: BuilderLock, write: CutWriter = write_cut) -> None:
        self.lock = lock
        self.store, self.builder = following(cfg, write)
        self._guard = threading.Lock()
        self._stopped = False

    @classmethod
    def start(cls, cfg: Config, write: CutWriter = write_cut) -> InProcessBuilder | None:
        """The host's builder in this process, its first file written; None if another holds the lock."""
        lock = BuilderLock.acquire(cut_dir(cfg), wait=False)
        if lock is None:
            return None
        built = cls(cfg, lock, write)
        built.refresh()
        return built

    @property
    def error(self) -> str | None:
        """Why the last refresh could not bring the newest cut to the file (None: it did)."""
        return self.store.last_error or self.builder.last_error

    def refresh(self) -> None:
        """Follow the job one step (`SnapshotStore.refresh`: its listener writes a new cut's file)."""
        with self._guard:
            if not self._stopped:
                self.store.refresh()

    def stop(self, timeout_s: float | None = None) -> None:
        """Close the file and give the lock back, after a refresh under way."""
        with self._guard:
            self._stopped = True
            self.builder.close()
            self.lock.release()


def own_builder(cfg: Config) -> InProcessBuilder | None:
    """A builder in this serving process when the host has none (a server run without the
    launcher, the tests' in-process servers); None when one holds the lock (the launcher's)."""
    built = InProcessBuilder.start(cfg)
    if built is not None:
        log.info("no cut builder holds %s: this process writes the host's cut file %s itself",
                 built.lock.path, cut_path(cfg))
    return built


def serving_store(cfg: Config, *, metrics: SnapshotMetrics | None = None,
                  max_staleness_ms: int | None = None) -> SnapshotStore:
    """A serving process's store: the host's cut file, mapped (`snapshots.mapped`); at its first
    refresh it writes that file itself if no builder runs on the host (`own_builder`). History and
    time travel read Delta through the same store's reader, as before."""
    return SnapshotStore(SnapshotReader(cfg.warehouse), cfg.refresh_interval_ms / 1000,
                         retention_ms=cfg.history_retention_ms, metrics=metrics, max_staleness_ms=max_staleness_ms,
                         cut_file=cut_path(cfg), builder=lambda: own_builder(cfg))


def run(cfg: Config, stopping: threading.Event) -> None:
    """Hold the host's lock, then write a file per cut until `stopping` is set."""
    lock = BuilderLock.acquire(cut_dir(cfg), wait=True)
    assert lock is not None
    log.info("cut builder: %s from %s", cut_path(cfg), cfg.warehouse)
    store, builder = following(cfg)
    try:
        store.refresh()
        store.start()
        stopping.wait()
    finally:
        store.stop(10.0)
        builder.close()
        lock.release()


def main(argv: list[str] | None = None) -> int:
    argument_parser("namesrv-cutbuilder", "Writes this host's shared cut file for the serving processes.") \
        .parse_args(argv)
    cfg = load_config()
    setup_logging(cfg.log_format)
    refuse_pandas(log)
    heapdump.install("cutbuilder", cfg.log_dir)  # off unless NAMESRV_TRACEMALLOC asks (a profiling run)
    stopping = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    run(cfg, stopping)
    log.info("cut builder stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
