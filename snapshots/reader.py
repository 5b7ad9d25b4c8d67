"""Reading consistent cuts, and the history rows about them, from the Delta tables.

A cut is the newest `snapshots` row plus each state table loaded at the version that row
records, so a reader never mixes two batches (`routeinfo.snapshot` indexes it).

`deltalake` and `pyarrow.parquet` are imported by the methods that read Delta, not here: the
remoting front imports this module (through `snapshots.store`) but reads cuts from the host's cut
file, and touches Delta only when it serves time travel; a bare import of it no longer loads them
(tests/project/test_front_imports.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc

from conf.store import StorePath, store_path
from routeinfo.snapshot import ROW_ORDER, Snapshot, build_snapshot
from routeinfo.topic_index import CHUNK_ROWS
from schemas import tables as t

if TYPE_CHECKING:
    from deltalake import DeltaTable


def _parquet_source(path: StorePath) -> str | pa.BufferReader:
    """What pyarrow reads a data file from: its local path, or its bytes read off HDFS (pyarrow's
    own HDFS client needs libhdfs, a native Hadoop build that Maven's jars do not carry)."""
    return str(path) if isinstance(path, Path) else pa.BufferReader(path.read_bytes())


def python_rows(table: pa.Table, order: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """A table's rows as dicts, sorted by the columns `order` (in Arrow, which releases the GIL),
    converted `CHUNK_ROWS` at a time with the GIL released between chunks.

    A serving process loads cuts on its refresher thread while its event loop answers. Arrow's
    conversion of a whole table to Python objects is one C call that holds the GIL throughout
    (100,000 brokers' rows: a few hundred milliseconds), and no lookup is answered meanwhile: the
    remoting front answered at p99 160 ms while cuts were loaded back to back, each lookup
    waiting for a conversion (tests/remoting/test_front_refresh.py)."""
    if order and table.num_rows > 1:
        table = table.sort_by([(column, "ascending") for column in order])
    rows: list[dict[str, Any]] = []
    for batch in table.to_batches(max_chunksize=CHUNK_ROWS):
        rows += batch.to_pylist()
        time.sleep(0)  # releases the GIL: a thread waiting for it (the answering loop) takes it now
    return rows


class SnapshotReader:
    """Reads cuts from the warehouse; keeps DeltaTable handles to load versions incrementally."""

    def __init__(self, warehouse: StorePath) -> None:
        self.warehouse = store_path(warehouse)
        self._handles: dict[str, DeltaTable] = {}
        self._rows: dict[str, tuple[int, list[dict[str, Any]]]] = {}  # table -> (version, rows) last loaded
        self._files: dict[str, dict[str, pa.Table]] = {}  # table -> data file -> its rows, as last read

    def _table(self, table: t.TableDef, version: int | None = None) -> DeltaTable:
        from deltalake import DeltaTable
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
        from deltalake import DeltaTable
        if not DeltaTable.is_deltatable(str(self.warehouse / t.SNAPSHOTS.name)):
            return None
        dataset = self._table(t.SNAPSHOTS).to_pyarrow_dataset()
        flt = pc.field("snapshotId") == snapshot_id if snapshot_id is not None else pc.field("commitTime") <= as_of_ms
        rows = dataset.to_table(filter=flt).to_pylist()
        return max(rows, key=lambda r: r["snapshotId"]) if rows else None

    def list_rows(self, *, limit: int, before: int | None = None) -> tuple[list[dict[str, Any]], int]:
        """Newest first, at most `limit` rows with snapshotId < `before`; and the total count."""
        from deltalake import DeltaTable
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
        from deltalake import DeltaTable
        path = self.warehouse / t.SNAPSHOTS.name
        if not DeltaTable.is_deltatable(str(path)):
            return None
        dt = self._table(t.SNAPSHOTS)
        dataset = dt.to_pyarrow_dataset()
        flt = None if after is None else pc.field("snapshotId") > after
        rows = dataset.to_table(filter=flt).to_pylist()
        return max(rows, key=lambda r: r["snapshotId"]) if rows else None

    def read_table(self, table: t.TableDef, version: int) -> pa.Table:
        """A table at a version, reading only the data files the last read of it did not: a cut
        replaces a few owners' rows, so most of its files are the previous cut's, and reading them
        all again was most of a refresh once a table had hundreds of files (docs/latency.md). A data
        file never changes once written; a table with deletion vectors is read whole."""
        import pyarrow.parquet as pq
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
            arrow = self.read_table(table, version)
            tables[table.name] = arrow if table is t.TOPIC_QUEUE else python_rows(arrow, ROW_ORDER.get(table.name, ()))
            if table is not t.TOPIC_QUEUE:
                self._rows[table.name] = (version, tables[table.name])
        return build_snapshot(row, tables)


def snapshot_bounds(first: int | None, last: int | None,
                    since_ms: int | None = None) -> tuple[str | None, pc.Expression | None]:
    """The file-pruning predicate (Delta's file statistics: no file opened) and the row filter of
    the `snapshots` rows with first <= snapshotId <= last committed at or after `since_ms` (None:
    that bound open); (None, None) when all are open. The predicate may keep a file the filter
    then empties, never the reverse (its bounds are whole numbers, loosened by int())."""
    pruning: list[str] = []
    rows: list[pc.Expression] = []
    if first is not None:
        pruning.append(f"snapshotId >= {int(first)}")
        rows.append(pc.field("snapshotId") >= first)
    if last is not None:
        pruning.append(f"snapshotId <= {int(last)}")
        rows.append(pc.field("snapshotId") <= last)
    if since_ms is not None:
        pruning.append(f"commitTime >= {int(since_ms)}")
        rows.append(pc.field("commitTime") >= since_ms)
    flt = None
    for condition in rows:
        flt = condition if flt is None else flt & condition
    return (" AND ".join(pruning) or None), flt


class SnapshotsTable:
    """A filtered read of a warehouse's `snapshots` table by snapshotId range: only the data files
    whose statistics meet the asked range are opened, where `SnapshotReader.list_rows` reads every
    row the warehouse ever committed (a fleet that heartbeats commits a cut every few seconds).

    The one such read for a watch's resume (`serving.watch.StoreHistory`) and the risks' folds
    (`snapshots.risk_history.snapshot_rows`). Its table handle is kept and brought up to date per
    read, under its lock (the handle is stateful), and dropped after a failure (a table replaced
    under it: a restored warehouse), so the next read opens the table again."""

    def __init__(self, warehouse: StorePath) -> None:
        self.path = str(store_path(warehouse) / t.SNAPSHOTS.name)
        self._lock = threading.Lock()
        self._table: DeltaTable | None = None

    def rows_between(self, first: int | None, last: int | None, *, limit: int | None = None,
                     since_ms: int | None = None,
                     columns: Sequence[str] | None = None) -> list[dict[str, Any]] | None:
        """The rows with first <= snapshotId <= last (None: open) committed at or after `since_ms`,
        in snapshotId order, of `columns` (None: all); [] while the table does not exist yet.
        None when there are more than `limit`: more data files in range than `limit` (each holds
        a cut or more; then no file is read), or more rows."""
        from deltalake import DeltaTable
        pruning, flt = snapshot_bounds(first, last, since_ms)
        read = None if columns is None else list(dict.fromkeys([*columns, "snapshotId"]))  # sorted by it
        with self._lock:
            try:
                if self._table is None:
                    if not DeltaTable.is_deltatable(self.path):
                        return []
                    self._table = DeltaTable(self.path)
                else:
                    self._table.update_incremental()
                dataset = self._table.to_pyarrow_dataset(file_pruning_predicate=pruning)
                if limit is not None and len(dataset.files) > limit:
                    return None
                table = dataset.to_table(columns=read, filter=flt)
            except Exception:
                self._table = None  # opened again by the next read
                raise
        if limit is not None and table.num_rows > limit:
            return None
        table = table.sort_by("snapshotId")
        if columns is not None:
            table = table.select(list(columns))
        rows: list[dict[str, Any]] = table.to_pylist()
        return rows


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
