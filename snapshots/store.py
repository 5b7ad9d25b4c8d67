"""The served cut, and the thread that swaps in newer ones as the job commits them.

Loading happens on a background thread; a request only dereferences `SnapshotStore.current`, so it
never waits on a load. A store either loads each cut from Delta itself (the cut builder's, the
tools') or, given the host's cut file (`cut_file`: what the serving processes do), maps the file
the host's builder writes (`snapshots.mapped`) and re-maps it when the builder renames a new one
over it (the head only, when the head names the index part the served cut maps already): no
Delta and no Arrow on that path, and a lookup holds one cut's mappings from start to end.
A missing or damaged file is the store's readiness problem (`not_ready` names it); such a store
never loads the cut from Delta instead; when the file is missing, or the served cut is behind the
job's newest, the builder's status file beside it (`freshness.BuilderStatus`) tells whether the
builder failed or is not running, and readiness says so. Readiness and read-your-writes are told
from the cut and the job's records (`snapshots.freshness`), past cuts come from a reader of their
own (`snapshots.history`). Flask-free: the HTTP server, the remoting front and the tools use it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from conf.memory import ReleaseEvery
from conf.processes import process_alive
from routeinfo.snapshot import Snapshot
from schemas.metrics import SnapshotMetrics
from schemas.progress import JOB_FILE, PROGRESS_FILE, read_job_start, read_progress
from snapshots import freshness
from snapshots.cutfile import CutFile, CutFileError, IndexPartError
from snapshots.file_watch import FileWatch
from snapshots.history import History
from snapshots.mapped import FileMark, file_mark, mapped_snapshot
from snapshots.reader import LockedReader, SnapshotReader

log = logging.getLogger(__name__)
# How often the refresher looks at the progress record's file for a rewrite (one stat), and how
# often once the record has not changed for QUIET_AFTER_S: the job is idle, and a wake-up every
# 20 ms was most of an idle serving process's CPU (about 0.7 % of a core each). A writer waiting
# for its cut pokes the refresher, so only a reader's first look after a quiet spell may wait the
# longer watch (at most 80 ms more).
WATCH_S = 0.02
WATCH_QUIET_S = 0.1
QUIET_AFTER_S = 30.0
# A store whose files the kernel watches (a local warehouse: `snapshots.file_watch`) is woken by the
# job's and the builder's writes themselves; its refresh interval is then only a safety net, and
# at least this long (the staleness it reports stays under one second with nothing written).
WATCHED_REFRESH_S = 1.0
RELEASE_AFTER_ROWS = 100_000  # topic_queue rows above which a reload gives its memory back
# ... at most this often: during a large fleet's registration wave topic_queue changes every cut,
# and each release walks malloc's arenas (the front's allocations wait for them meanwhile)
RELEASE_EVERY_S = 30.0


def read_builder_status(path: Path) -> freshness.BuilderStatus | None:
    """The builder's status file (`freshness.STATUS_FILE`), or None when there is none or it cannot
    be read (a builder older than the file, or one that could not write it)."""
    try:
        return freshness.BuilderStatus.from_json(json.loads(path.read_bytes()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("the cut builder's status %s cannot be read: %s: %s", path, type(exc).__name__, exc)
        return None


class OwnedBuilder(Protocol):
    """A cut builder run by this store's refresher and stopped with it (`snapshots.cutbuilder`)."""

    def refresh(self) -> None: ...

    def stop(self, timeout_s: float | None = None) -> None: ...

    @property
    def error(self) -> str | None: ...


class SnapshotStore:
    """Holds the served snapshot; a daemon thread swaps in newer cuts as they are committed."""

    FULL_SCAN_S = 5.0  # longest a cut announced only by the `snapshots` table waits to be seen
    # How long the served cut may be behind the job's newest while the host's builder has failed or
    # is down before readiness says so: a restart by the launcher, or a failure its next attempt
    # mends, does not take every serving process of the host out of its load balancer.
    BUILDER_GRACE_S = 10.0

    def __init__(self, reader: SnapshotReader, refresh_interval_s: float, *, retention_ms: int,
                 metrics: SnapshotMetrics | None = None, max_staleness_ms: int | None = None,
                 cut_file: Path | None = None, builder: Callable[[], OwnedBuilder | None] | None = None) -> None:
        """`max_staleness_ms`: how long the store may go unread before `not_ready` says so (None: no bound).
        `cut_file`: serve the cut the host's builder writes there (module docstring); `builder`: called
        at the first refresh, it may start a builder in this process (`snapshots.cutbuilder`: when
        none holds the host's lock), which every later refresh then runs first, on the same
        thread, and which is stopped with the store."""
        self.reader = reader
        self.metrics = metrics
        self.refresh_interval_s = refresh_interval_s
        self.current: Snapshot = Snapshot.empty()
        self.progress: dict[str, Any] | None = None
        self.job_started: int | None = None  # the running job instance's start (schemas.progress)
        self.last_check: float | None = None  # when the store last answered (time.time())
        self.max_staleness_ms = max_staleness_ms
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._poke = threading.Event()
        self._lock = threading.Lock()
        self._swapped = threading.Condition()
        self._thread: threading.Thread | None = None
        self._watch: FileWatch | None = None
        self._watch_problem: str | None = None  # why the files are not watched (logged once)
        self._last_scan = float("-inf")
        self._releases = ReleaseEvery(RELEASE_EVERY_S)  # a large reload's or a swapped mapping's freed memory
        self._listeners: list[Callable[[Snapshot, bool], None]] = []
        self.cut_file = cut_file
        self.cut_problem: str | None = None  # why the cut file cannot be served (None: it can, or no file is used)
        self._cut_mark: FileMark | None = None  # the file last mapped (or refused)
        self._refused_index: tuple[Path, FileMark | None] | None = None  # the index part that head was refused for
        self.builder_status: freshness.BuilderStatus | None = None  # the builder's status file, as last read
        self._status_mark: FileMark | None = None
        self._builder_trouble: str | None = None  # `freshness.builder_behind` at the last refresh
        self._behind_since: float | None = None  # since when (monotonic) the served cut is behind the job's
        self._start_builder = builder
        self._builder: OwnedBuilder | None = None
        self.history = History(reader.warehouse, retention_ms, lambda: self.current)

    @property
    def retention_ms(self) -> int:
        """How far back past cuts are served (NAMESRV_HISTORY_RETENTION_MS)."""
        return self.history.retention_ms

    def refresh(self) -> bool:
        """Load the newest cut if it is newer than the served one; True if a swap happened."""
        with self._lock:
            if self._start_builder is not None:  # before the first look at the file: it writes it
                start, self._start_builder = self._start_builder, None
                self._builder = start()
            elif self._builder is not None:
                self._builder.refresh()
            started = time.perf_counter()
            swapped = self._refresh()
            if self._builder is not None and self._builder.error is not None and self.last_error is None:
                # this process writes the file: its failure to is this store's (the last good cut stays)
                self.last_error = f"the cut builder: {self._builder.error}"
            if self.metrics is not None:
                self.metrics.observe(time.perf_counter() - started, ok=self.last_error is None, swapped=swapped)
        if swapped:
            with self._swapped:
                self._swapped.notify_all()
        for listener in self._listeners:
            try:
                listener(self.current, swapped)
            except Exception:  # a listener's failure is its own; the store keeps refreshing
                log.exception("a refresh listener failed")
        return swapped

    def add_listener(self, listener: Callable[[Snapshot, bool], None]) -> None:
        """Call `listener(current, swapped)` after every refresh, on the refreshing thread: how the
        cut builder (`snapshots.cutbuilder`) follows the job with this store's watch rather than
        one of its own. Add listeners before `start`."""
        self._listeners.append(listener)

    def served_offsets(self) -> dict[str, int]:
        """Source offsets whose events the served snapshot reflects (`freshness.served_offsets`)."""
        return freshness.served_offsets(self.current, self.progress)

    def served_mark(self) -> freshness.LogMark:
        """Where in the log the served snapshot stands (`freshness.served_mark`)."""
        return freshness.served_mark(self.current, self.progress)

    def mark(self) -> freshness.LogMark:
        """Where the job stands in the log, to take just before publishing a write (`serves`)."""
        return freshness.log_mark(self.progress)

    def serves(self, coords: list[tuple[int, int]], mark: freshness.LogMark | None = None) -> bool:
        """Whether the served snapshot includes the events published at these (partition, offset)s;
        `mark` (`mark()` taken before publishing) tells a write into a log that went back."""
        return freshness.includes(self.served_mark(), coords, mark)

    def not_ready(self) -> str | None:
        """Why this server should not take traffic (None: ready; the cut file's problem, then
        `freshness.not_ready`, then the host's builder's failure when the served cut has been behind
        the job's for BUILDER_GRACE_S, then `freshness.too_stale`)."""
        return self.cut_problem or freshness.not_ready(self.current, self.progress, self.job_started) or \
            self._builder_problem() or freshness.too_stale(self.current, self.staleness_ms(), self.max_staleness_ms)

    def _builder_problem(self) -> str | None:
        behind, trouble = self._behind_since, self._builder_trouble
        if trouble is None or behind is None or time.monotonic() - behind < self.BUILDER_GRACE_S:
            return None
        return trouble

    def staleness_ms(self) -> int | None:
        """How long ago the store last answered this replica (None: never): while it is cut off from
        the store, its answers come from a cut at least this old."""
        return None if self.last_check is None else max(0, int((time.time() - self.last_check) * 1000))

    def _refresh(self) -> bool:
        if self.cut_file is not None:
            return self._refresh_mapped(self.cut_file)
        try:
            self.progress = read_progress(self.reader.warehouse)
            self.job_started = read_job_start(self.reader.warehouse)
            now = time.monotonic()
            if self._nothing_newer(now):
                self.last_check = time.time()
                self.last_error = None
                return False
            row = self._announced_cut()
            if row is None:
                row = self.reader.newest_row(after=self.current.snapshot_id)
                self._last_scan = now
            self.last_check = time.time()
            if row is None:
                self.last_error = None
                return False
            snap = self.reader.load(row, previous=self.current)
        except Exception as exc:  # keep serving the last good cut; /healthz reports the error
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("snapshot refresh failed, still serving %s: %s", self.current.snapshot_id, self.last_error)
            return False
        reloaded = snap.topics is not self.current.topics
        self.current = snap  # atomic reference swap
        self.last_error = None
        # the old index and the load's buffers, once requests drop them; no garbage collection,
        # which would hold the GIL from the answering loop for the whole heap's walk
        if reloaded and snap.topics.row_count() >= RELEASE_AFTER_ROWS:
            self._releases.release()
        return True

    def _refresh_mapped(self, path: Path) -> bool:
        """Map the cut file when it is not the one mapped already (a new inode, size or mtime)."""
        try:
            self.progress = read_progress(self.reader.warehouse)
            self.job_started = read_job_start(self.reader.warehouse)
        except Exception as exc:  # the job's records are unreadable; the served cut stays
            self.last_error = f"{type(exc).__name__}: {exc}"
            return False
        self.last_check = time.time()
        self.last_error = None
        self._read_builder_status(path.parent / freshness.STATUS_FILE)
        swapped = self._map(path)
        self._note_behind()
        return swapped

    def _read_builder_status(self, status_path: Path) -> None:
        """Read the builder's status when it changed: one stat otherwise, the builder rewriting it
        only on a new cut or a failure."""
        mark = file_mark(status_path)
        if mark == self._status_mark:
            return
        self._status_mark = mark
        self.builder_status = None if mark is None else read_builder_status(status_path)
        if self.metrics is not None:
            failure = None if self.builder_status is None else self.builder_status.failure
            self.metrics.builder_failures.set(0 if failure is None else failure.count)

    def _note_behind(self) -> None:
        """Whether, and since when, the served cut is behind the job's newest, and what the builder
        says of why (`freshness.builder_behind`)."""
        newest = (self.progress or {}).get("snapshotId")
        served = self.current.snapshot_id
        if newest is None or (served is not None and served >= newest):
            self._behind_since = self._builder_trouble = None
            return
        if self._behind_since is None:
            self._behind_since = time.monotonic()
        status = self.builder_status
        alive = status is not None and process_alive(status.pid, status.process_start)
        self._builder_trouble = freshness.builder_behind(status, alive, served, newest)

    def _missing_file(self, path: Path) -> str:
        """`cut_problem` when there is no cut file: what the builder says of it, when it says."""
        status = self.builder_status
        if status is None:
            return (f"no cut file at {path}: the host's cut builder (python -m snapshots.cutbuilder, "
                    "started by the launcher) writes it")
        trouble = freshness.builder_trouble(status, process_alive(status.pid, status.process_start))
        return f"no cut file at {path}: " + (trouble or f"the host's cut builder (pid {status.pid}) has not written it yet")

    def _map(self, path: Path) -> bool:
        """Map the head at `path` when it is new, sharing the served cut's index part when the head
        names the same one (only the head is then read and checked). A head that cannot be served
        is tried again when it changes, or, when its index part was the trouble (missing: removed
        after newer cuts; damaged), when that part changes."""
        mark = file_mark(path)
        if mark is None:
            self._cut_mark = None
            self.cut_problem = self._missing_file(path)
            return False
        refused = self._refused_index
        if mark == self._cut_mark and (refused is None or file_mark(refused[0]) == refused[1]):
            if self.cut_problem is not None:
                self.last_error = self.cut_problem
            return False
        self._cut_mark, self._refused_index = mark, None
        served = self.current.cut
        try:
            snap = mapped_snapshot(CutFile.open(path, reuse=served if isinstance(served, CutFile) else None), self.current)
        except (OSError, CutFileError, ValueError, KeyError, TypeError) as exc:
            if isinstance(exc, IndexPartError):
                self._refused_index = (exc.index_path, file_mark(exc.index_path))
            self.cut_problem = self.last_error = f"the cut file {path} cannot be served: {type(exc).__name__}: {exc}"
            log.error("%s; still serving cut %s", self.cut_problem, self.current.snapshot_id)
            return False
        self.cut_problem = None
        self.current = snap  # atomic reference swap; the old mappings go with their last answer
        # what the old cut's rows and the parse of the new head freed, given back to the host
        # (a front at 10,000 × 100 kept about 170 MiB freed but not returned: conf/heapdump)
        self._releases.release()
        return True

    def _announced_cut(self) -> dict[str, Any] | None:
        """The newest cut's `snapshots` row as the job's progress record carries it, when that cut
        is newer than the served one: no scan of the `snapshots` table, whose files grow by one
        per cut (docs/latency.md)."""
        cut = (self.progress or {}).get("cut")
        current = self.current.snapshot_id
        if not isinstance(cut, dict) or cut.get("snapshotId") != (self.progress or {}).get("snapshotId"):
            return None
        return cut if current is None or cut["snapshotId"] > current else None

    def _nothing_newer(self, now: float) -> bool:
        """Whether the job's progress record says no cut newer than the served one exists.

        The job writes `_progress.json` (a few hundred bytes) after every batch, naming the newest
        cut it committed; reading it is far cheaper than scanning the `snapshots` table, which a
        poll every refresh interval otherwise does (a third of the remoting front's CPU under a
        registration wave). The table is still scanned every `FULL_SCAN_S`: a job killed between
        committing a cut and writing its progress leaves that cut announced only in the table.
        """
        progress = self.progress
        if progress is None or now - self._last_scan >= self.FULL_SCAN_S:
            return False
        newest = progress.get("snapshotId")
        return newest is not None and newest == self.current.snapshot_id

    def historic(self, *, as_of_ms: int | None = None, snapshot_id: int | None = None) -> Snapshot:
        """The cut as of an instant or with an id (time travel); raises LookupError with a remark.

        Served from a separate reader (its own table handles) and a small cache, so time-travel
        requests never disturb the current snapshot or each other (`snapshots.history`).
        """
        return self.history.cut(as_of_ms=as_of_ms, snapshot_id=snapshot_id)

    def reader_for_history(self) -> LockedReader:
        """The history reader, for list/change queries (serialized: its handles are stateful)."""
        return self.history.reader()

    def wait_for(self, covered: Callable[[Snapshot], bool], timeout_s: float) -> Snapshot | None:
        """Block until `covered(snapshot)` holds for the served snapshot, or None after `timeout_s`.

        Waiting writers poke the refresher so a new cut is picked up as soon as it is committed.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            snap = self.current
            if covered(snap):
                return snap
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self._poke.set()
            with self._swapped:
                self._swapped.wait(min(remaining, 0.05))

    def poke(self) -> None:
        """Ask the refresher to look for a newer cut now (a writer is waiting for one)."""
        self._poke.set()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="snapshot-refresh", daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float | None = None) -> bool:
        """End the refresher; with `timeout_s`, wait up to that long for it (a load may be under
        way). True once it has ended (or never ran); the thread is a daemon either way."""
        self._stop.set()
        self._poke.set()
        if self._thread is not None and timeout_s is not None:
            self._thread.join(timeout_s)
        if self._builder is not None:
            self._builder.stop(timeout_s)
        return self._thread is None or not self._thread.is_alive()

    def _run(self) -> None:
        """Refresh when poked, every refresh interval, and as soon as the job rewrites its progress
        record or the builder the cut file. On a local warehouse the kernel says so (`_watched`);
        otherwise a stat of those files every WATCH_S finds a new cut in tens of milliseconds
        instead of half a refresh interval on average (docs/latency.md)."""
        changed_at = time.monotonic()
        seen = None
        try:
            while not self._stop.is_set():
                watched = self._watched()
                if not watched:
                    mark = self._watch_mark()
                    if mark != seen:
                        seen, changed_at = mark, time.monotonic()
                self.refresh()
                if watched:  # the watch pokes on a change: one wait, then the next refresh either way
                    if self._poke.wait(max(self.refresh_interval_s, WATCHED_REFRESH_S)):
                        self._poke.clear()
                    continue
                due = time.monotonic() + self.refresh_interval_s
                while not self._stop.is_set():
                    watch = WATCH_S if time.monotonic() - changed_at < QUIET_AFTER_S else WATCH_QUIET_S
                    if self._poke.wait(min(watch, max(0.0, due - time.monotonic()))):
                        self._poke.clear()
                        break
                    if time.monotonic() >= due or self._watch_mark() != seen:
                        break
        finally:
            if self._watch is not None:
                self._watch.close()
                self._watch = None

    def _watched(self) -> bool:
        """Whether the kernel tells this store of its files' changes, setting the watch up when it
        can (tried again at each refresh until it can: the warehouse's directory may not exist yet).
        Only for a local warehouse; a store on HDFS stats its files on WATCH_S's timer."""
        if self._watch is not None:
            if not self._watch.broken:
                return True
            self._watch.close()  # its directory was removed or replaced: watch the one there now
            self._watch = None
        warehouse = self.reader.warehouse
        if not isinstance(warehouse, Path):
            return False
        files = [warehouse / PROGRESS_FILE, warehouse / JOB_FILE]
        if self.cut_file is not None:
            files += [self.cut_file, self.cut_file.parent / freshness.STATUS_FILE]
        try:
            self._watch = FileWatch(files, self._poke.set)
        except OSError as exc:
            if self._watch_problem is None:
                log.info("the store's files are not watched yet (%s); looking at them every %.0f ms meanwhile",
                         exc, 1000 * WATCH_S)
            self._watch_problem = str(exc)
            return False
        if self._watch_problem is not None:
            log.info("the store's files are watched now")
        self._watch_problem = None
        return True

    def _watch_mark(self) -> tuple[FileMark | None, FileMark | None]:
        """What the refresher watches: the progress record, and the cut file when serving one
        (the builder renames a new one over it after the job's record changed)."""
        return self._progress_mark(), None if self.cut_file is None else file_mark(self.cut_file)

    def _progress_mark(self) -> tuple[int, int, int] | None:
        """Identifies the progress record's current version (it is replaced by a rename)."""
        try:
            st = (self.reader.warehouse / PROGRESS_FILE).stat()
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size
