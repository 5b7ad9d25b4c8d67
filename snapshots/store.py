"""The served cut, and the thread that swaps in newer ones as the job commits them.

Loading happens on a background thread; a request only dereferences `SnapshotStore.current`, so it
never waits on a load. Readiness and read-your-writes are told from the cut and the job's records
(`snapshots.freshness`), past cuts come from a reader of their own (`snapshots.history`). Flask-free:
the HTTP server, the remoting front and the tools use it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from conf.memory import release_memory
from routeinfo.snapshot import Snapshot
from schemas.metrics import SnapshotMetrics
from schemas.progress import PROGRESS_FILE, read_job_start, read_progress
from snapshots import freshness
from snapshots.history import History
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
RELEASE_AFTER_ROWS = 100_000  # topic_queue rows above which a reload gives its memory back
# ... at most this often: during a large fleet's registration wave topic_queue changes every cut,
# and each release walks malloc's arenas (the front's allocations wait for them meanwhile)
RELEASE_EVERY_S = 30.0


class SnapshotStore:
    """Holds the served snapshot; a daemon thread swaps in newer cuts as they are committed."""

    FULL_SCAN_S = 5.0  # longest a cut announced only by the `snapshots` table waits to be seen

    def __init__(self, reader: SnapshotReader, refresh_interval_s: float, *, retention_ms: int,
                 metrics: SnapshotMetrics | None = None, max_staleness_ms: int | None = None) -> None:
        """`max_staleness_ms`: how long the store may go unread before `not_ready` says so (None: no bound)."""
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
        self._last_scan = float("-inf")
        self._released = float("-inf")  # when a reload last gave memory back (monotonic)
        self._listeners: list[Callable[[Snapshot, bool], None]] = []
        self.history = History(reader.warehouse, retention_ms, lambda: self.current)

    @property
    def retention_ms(self) -> int:
        """How far back past cuts are served (NAMESRV_HISTORY_RETENTION_MS)."""
        return self.history.retention_ms

    def refresh(self) -> bool:
        """Load the newest cut if it is newer than the served one; True if a swap happened."""
        with self._lock:
            started = time.perf_counter()
            swapped = self._refresh()
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
        """Why this server should not take traffic (None: ready; `freshness.not_ready`, then
        `freshness.too_stale`)."""
        return freshness.not_ready(self.current, self.progress, self.job_started) or \
            freshness.too_stale(self.current, self.staleness_ms(), self.max_staleness_ms)

    def staleness_ms(self) -> int | None:
        """How long ago the store last answered this replica (None: never): while it is cut off from
        the store, its answers come from a cut at least this old."""
        return None if self.last_check is None else max(0, int((time.time() - self.last_check) * 1000))

    def _refresh(self) -> bool:
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
        if reloaded and snap.topics.row_count() >= RELEASE_AFTER_ROWS and \
                time.monotonic() - self._released >= RELEASE_EVERY_S:
            self._released = time.monotonic()
            # the old index and the load's buffers, once requests drop them; no garbage collection,
            # which would hold the GIL from the answering loop for the whole heap's walk
            release_memory(collect=False)
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
        if self._thread is None:
            return True
        if timeout_s is not None:
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        """Refresh when poked, every refresh interval, and as soon as the job rewrites its progress
        record: a stat of that file every WATCH_S costs next to nothing, and finds a new cut in
        tens of milliseconds instead of half a refresh interval on average (docs/latency.md)."""
        changed_at = time.monotonic()
        seen = None
        while not self._stop.is_set():
            mark = self._progress_mark()
            if mark != seen:
                seen, changed_at = mark, time.monotonic()
            self.refresh()
            due = time.monotonic() + self.refresh_interval_s
            while not self._stop.is_set():
                watch = WATCH_S if time.monotonic() - changed_at < QUIET_AFTER_S else WATCH_QUIET_S
                if self._poke.wait(min(watch, max(0.0, due - time.monotonic()))):
                    self._poke.clear()
                    break
                if time.monotonic() >= due or self._progress_mark() != seen:
                    break

    def _progress_mark(self) -> tuple[int, int, int] | None:
        """Identifies the progress record's current version (it is replaced by a rename)."""
        try:
            st = (self.reader.warehouse / PROGRESS_FILE).stat()
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size
