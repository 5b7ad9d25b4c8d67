"""Reading consistent cuts from the Delta tables, and the store that swaps in newer ones.

A cut is the newest `snapshots` row plus each state table loaded at the version that row
records, so a reader never mixes two batches (`routeinfo.snapshot` indexes it). Loading
happens on a background thread; a request only dereferences `SnapshotStore.current`, so it
never waits on a load. Flask-free: the HTTP server, the remoting front and the notebooks use it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable

from conf.memory import release_memory
from conf.store import StorePath, store_path
from routeinfo.snapshot import Snapshot, build_snapshot
from schemas import tables as t
from schemas.metrics import SnapshotMetrics
from schemas.progress import PROGRESS_FILE, covers, read_job_start, read_progress

log = logging.getLogger(__name__)
# How often the refresher looks at the progress record's file for a rewrite (one stat).
WATCH_S = 0.02
RELEASE_AFTER_ROWS = 100_000  # topic_queue rows above which a reload gives its memory back


def _parquet_source(path: StorePath) -> str | pa.BufferReader:
    """What pyarrow reads a data file from: its local path, or its bytes read off HDFS (pyarrow's
    own HDFS client needs libhdfs, a native Hadoop build that Maven's jars do not carry)."""
    return str(path) if isinstance(path, Path) else pa.BufferReader(path.read_bytes())


class SnapshotReader:
    """Reads cuts from the warehouse; keeps DeltaTable handles to load versions incrementally."""

    def __init__(self, warehouse: StorePath) -> None:
        self.warehouse = store_path(warehouse)
        self._handles: dict[str, DeltaTable] = {}
        self._rows: dict[str, tuple[int, list[dict[str, Any]]]] = {}  # table -> (version, rows) last loaded
        self._files: dict[str, dict[str, pa.Table]] = {}  # table -> data file -> its rows, as last read

    def _table(self, table: t.TableDef, version: int | None = None) -> DeltaTable:
        dt = self._handles.get(table.name)
        path = str(self.warehouse / table.name)
        if dt is None:
            dt = DeltaTable(path) if version is None else DeltaTable(path, version=version)
            self._handles[table.name] = dt
        elif version is None:
            dt.update_incremental()
        elif dt.version() != version:
            dt.load_as_version(version)
        return dt

    def row_at(self, *, as_of_ms: int | None = None, snapshot_id: int | None = None) -> dict[str, Any] | None:
        """The snapshots row with `snapshot_id`, or the newest committed at or before `as_of_ms`."""
        if not DeltaTable.is_deltatable(str(self.warehouse / t.SNAPSHOTS.name)):
            return None
        dataset = self._table(t.SNAPSHOTS).to_pyarrow_dataset()
        flt = pc.field("snapshotId") == snapshot_id if snapshot_id is not None else pc.field("commitTime") <= as_of_ms
        rows = dataset.to_table(filter=flt).to_pylist()
        return max(rows, key=lambda r: r["snapshotId"]) if rows else None

    def list_rows(self, *, limit: int, before: int | None = None) -> tuple[list[dict[str, Any]], int]:
        """Newest first, at most `limit` rows with snapshotId < `before`; and the total count."""
        if not DeltaTable.is_deltatable(str(self.warehouse / t.SNAPSHOTS.name)):
            return [], 0
        table = self._table(t.SNAPSHOTS).to_pyarrow_dataset().to_table()
        total = table.num_rows
        if before is not None:
            table = table.filter(pc.field("snapshotId") < before)
        ids = table.column("snapshotId").to_pylist()
        order = sorted(range(len(ids)), key=lambda i: -ids[i])[:limit]
        return table.take(pa.array(order, type=pa.int64())).to_pylist(), total  # [] alone is a null array

    def changes(self, version: int, flt: Any) -> list[dict[str, Any]]:
        """route_changes rows as of table version `version` that match the pyarrow filter `flt`."""
        dt = self._table(t.ROUTE_CHANGES, version)
        rows: list[dict[str, Any]] = dt.to_pyarrow_dataset().to_table(filter=flt).to_pylist()
        rows.sort(key=lambda r: (r["snapshotId"], r["seq"]))
        return rows

    def newest_row(self, after: int | None = None) -> dict[str, Any] | None:
        """The newest `snapshots` row (None if there is none yet, or none newer than `after`)."""
        path = self.warehouse / t.SNAPSHOTS.name
        if not DeltaTable.is_deltatable(str(path)):
            return None
        dt = self._table(t.SNAPSHOTS)
        dataset = dt.to_pyarrow_dataset()
        flt = None if after is None else pc.field("snapshotId") > after
        rows = dataset.to_table(filter=flt).to_pylist()
        return max(rows, key=lambda r: r["snapshotId"]) if rows else None

    def _read(self, table: t.TableDef, version: int) -> pa.Table:
        """A table at a version, reading only the data files the last read of it did not: a cut
        replaces a few owners' rows, so most of its files are the previous cut's, and reading them
        all again was most of a refresh once a table had hundreds of files (docs/latency.md). A data
        file never changes once written; a table with deletion vectors is read whole."""
        dt = self._table(table, version)
        if dt.protocol().reader_features:
            return dt.to_pyarrow_table()
        paths = pa.table(dt.get_add_actions(flatten=True)).column("path").to_pylist()
        kept = self._files.get(table.name, {})
        root = self.warehouse / table.name
        parts = {p: kept[p] if p in kept else pq.read_table(_parquet_source(root / unquote(p)), schema=table.schema)
                 for p in paths}
        self._files[table.name] = parts
        return pa.concat_tables(parts.values()) if parts else table.schema.empty_table()

    def load(self, row: dict[str, Any], previous: Snapshot | None = None) -> Snapshot:
        """The cut `row` names. Its topic_queue index is taken from `previous` when that cut has
        the same topic_queue version: most cuts change only liveness (a flush of broker_live
        every minute), and re-reading and re-sorting a million queue rows for each would cost
        a second of CPU and briefly double the process's memory."""
        tables: dict[str, Any] = {}
        for table in t.STATE_TABLES:
            version = row[t.version_column(table)]
            if table is t.TOPIC_QUEUE and previous is not None and previous.versions.get(table.name) == version:
                tables[table.name] = previous.topics
                continue
            kept = self._rows.get(table.name)
            if kept is not None and kept[0] == version:  # unchanged since the last load: not read again
                tables[table.name] = kept[1]
                continue
            arrow = self._read(table, version)
            tables[table.name] = arrow if table is t.TOPIC_QUEUE else arrow.to_pylist()
            if table is not t.TOPIC_QUEUE:
                self._rows[table.name] = (version, tables[table.name])
        return build_snapshot(row, tables)


class SnapshotStore:
    """Holds the served snapshot; a daemon thread swaps in newer cuts as they are committed."""

    FULL_SCAN_S = 5.0  # longest a cut announced only by the `snapshots` table waits to be seen

    def __init__(self, reader: SnapshotReader, refresh_interval_s: float, *, retention_ms: int,
                 metrics: SnapshotMetrics | None = None) -> None:
        self.reader = reader
        self.metrics = metrics
        self.refresh_interval_s = refresh_interval_s
        self.retention_ms = retention_ms
        self._history_reader = SnapshotReader(reader.warehouse)
        self._history_lock = threading.Lock()
        self._history_cache: dict[int, Snapshot] = {}
        self.current: Snapshot = Snapshot.empty()
        self.progress: dict[str, Any] | None = None
        self.job_started: int | None = None  # the running job instance's start (schemas.progress)
        self.last_check: float | None = None
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._poke = threading.Event()
        self._lock = threading.Lock()
        self._swapped = threading.Condition()
        self._thread: threading.Thread | None = None
        self._last_scan = float("-inf")

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
        return swapped

    def served_offsets(self) -> dict[str, int]:
        """Source offsets whose events the served snapshot reflects.

        The job writes a snapshot only when something changed and records every batch's
        progress; if the served snapshot is the newest one that progress knows of, everything up
        to the progress offsets is included (the batches after it changed nothing).
        """
        snap, progress = self.current, self.progress
        if progress is not None and progress.get("snapshotId") == snap.snapshot_id:
            return {str(k): int(v) for k, v in progress["sourceOffsets"].items()}
        return snap.source_offsets

    def serves(self, coords: list[tuple[int, int]]) -> bool:
        """Whether the served snapshot includes the events published at these (partition, offset)s."""
        return covers(self.served_offsets(), coords)

    def not_ready(self) -> str | None:
        """Why this server should not take traffic yet (None: ready): it needs a served cut, and
        the job instance that runs now must have committed a batch since it started, so that a
        registration published now is served within a batch or two."""
        if self.current.snapshot_id is None:
            return "no snapshot is served yet: the streaming job has not committed its first cut"
        if self.job_started is None:
            return "the streaming job has not started"
        if self.progress is None or self.progress.get("jobStartedAt") != self.job_started:
            return "the streaming job has started but not committed a batch yet"
        return None

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
        if reloaded and snap.topics.row_count() >= RELEASE_AFTER_ROWS:
            release_memory()  # the old index and the load's buffers, once requests drop them
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
        requests never disturb the current snapshot or each other.
        """
        with self._history_lock:
            row = self._history_reader.row_at(as_of_ms=as_of_ms, snapshot_id=snapshot_id)
            if row is None:
                raise LookupError(f"no snapshot {snapshot_id}" if snapshot_id is not None else
                                  f"no snapshot was committed at or before {as_of_ms} (epoch ms)")
            if row["commitTime"] < time.time() * 1000 - self.retention_ms and row["snapshotId"] != self.current.snapshot_id:
                raise LookupError(f"snapshot {row['snapshotId']} is older than the history retention "
                                  f"({self.retention_ms // 3_600_000} h)")
            cached = self._history_cache.get(row["snapshotId"])
            if cached is not None:
                return cached
            try:
                snap = self._history_reader.load(row, previous=self.current)
            except Exception as exc:  # files vacuumed or log entries cleaned up
                raise LookupError(f"snapshot {row['snapshotId']} can no longer be read ({type(exc).__name__}); "
                                  f"it is beyond the retained history") from None
            if len(self._history_cache) >= 16:
                self._history_cache.pop(next(iter(self._history_cache)))
            self._history_cache[row["snapshotId"]] = snap
            return snap

    def reader_for_history(self) -> LockedReader:
        """The history reader, for list/change queries (serialized: its handles are stateful)."""
        return LockedReader(self._history_reader, self._history_lock)

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

    def stop(self) -> None:
        self._stop.set()
        self._poke.set()

    def _run(self) -> None:
        """Refresh when poked, every refresh interval, and as soon as the job rewrites its progress
        record: a stat of that file every WATCH_S costs next to nothing, and finds a new cut in
        tens of milliseconds instead of half a refresh interval on average (docs/latency.md)."""
        while not self._stop.is_set():
            seen = self._progress_mark()
            self.refresh()
            due = time.monotonic() + self.refresh_interval_s
            while not self._stop.is_set():
                if self._poke.wait(min(WATCH_S, max(0.0, due - time.monotonic()))):
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


class LockedReader:
    """Calls a SnapshotReader's methods under a lock."""

    def __init__(self, reader: SnapshotReader, lock: threading.Lock) -> None:
        self._reader, self._lock = reader, lock

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._reader, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return method(*args, **kwargs)
        return call
