"""Risks over the retained history: which past cuts a `RiskTracker` reads, from Delta (issue 39).

A risk's `since` is the first cut of its uninterrupted run (`routeinfo.risks`), so it needs the
cuts before the one asked about, back to where the run began. The served cut is only the newest;
the history is in Delta, retained for NAMESRV_HISTORY_RETENTION_MS (7 days), and a fleet that
heartbeats commits a cut every few seconds: far too many to load every one of them at a serving
process's start. This module decides which cuts can change a risk, loads only those, and folds
them into a tracker (`HistoryFold`); the serving side (`serving.risks`) does that at its start, in
the background, then folds each cut it serves, and folds afresh for `?asOf=`.

Which cuts are read
-------------------
A risk reads four things of a cut: its topic_queue, its BrokerDatas (broker_addr, with the
cluster), its broker_live entries (which addresses are live, and their DataVersions) and the
BROKER_EXPIRED rows of route_changes. Between two consecutive `snapshots` rows, the versions each
row records say which tables moved (`classify`):

* `ROUTE`: topic_queue, broker_addr or cluster_addr moved, or the cut committed change-log rows
  about brokers or topics: the cut is read and folded, with the expiries it committed. Every
  registration, expiry, unregistration, topic or permission change is here (each writes such a
  row; KV and switch rows name a namespace and do not count).
* `LIVE`: only broker_live moved (heartbeats, with NAMESRV_LIVE_FLUSH_MS = 0 in every batch that
  had one). Only its live entries and DataVersions can have changed, so only broker_live is read
  at that version (its new files; the reader keeps the others), and its (address, brokerId,
  DataVersion) columns are compared with the last folded cut's in Arrow. Equal (a heartbeat that
  moved only lastUpdateTimestamp): the cut is quiet. Different (a DataVersion that moved without
  a change-log row, as a re-registration whose topics did not change does): loaded and folded.
* `QUIET`: nothing a risk reads moved (KV, switches, filter servers; a forced cut after
  maintenance points at compacted versions of the same rows, and is `ROUTE` by its versions).

A quiet cut changes no risk but the two read over a window of time: flapping (expiries within a
day of the cut) and data-version-backwards (a step back within a day). Within a run of quiet
cuts nothing new enters either window, so each count only falls as time passes; folding the last
quiet cut of each run (the previous cut's topology at that cut's time, `refold`: no load) is
enough to see a risk that cleared inside the run and make its next appearance a new run.

What is read of a folded cut: what a risk reads, no whole cut. topic_queue's topic, group, perm
and writeQueueNums (`RISK_QUEUE_COLUMNS`), read at the cut's version only when the version moved
and only while the tracker computes its topic facts (`routeinfo.risks.TopicColumns`: dropped once
folded, kept by the tracker as facts); broker_addr's rows (the BrokerDatas) and broker_live's
`LIVE_COLUMNS`, small. A cut loaded whole (`SnapshotReader.load`: every table as Python rows,
topic_queue as a TopicIndex beside the reader's copy of its files) held about three times the
topic_queue's columns per cut at 10,000 × 100, and the process kept that peak afterwards.

A cut that cannot be read
-------------------------
A history older than the retention has had its files vacuumed or its log entries cleaned up: a
cut that fails to read is looked at (`version_gone`): when a version it names has left the log or
names a data file that is no longer there, it is gone for good, and the fold begins again after
it (the since it reads from then on may only be an upper bound: `since_at_or_before`). When its
files are all there, the failure is taken for a passing one (a store that did not answer, a file
read while it was being copied back): the fold waits (`stall`, said by the service's answer as
`historyProblem` and in the log) and reads the same cut again, `RETRY_S` doubling up to
`RETRY_MAX_S`, and gives it up as gone only after `RETRIES` tries.

What `since` then says: exactly the first cut of the run, read over every retained cut, except
for a risk that already held at the oldest cut read (the oldest retained, or the first after a
cut that could no longer be read): its since is that cut's time and `RiskReport.since_at_or_before`
says it may have begun earlier, unless that cut is the first the warehouse ever committed
(`first_cut_id`, `HistoryFold.from_first`: nothing came before it). Flapping is counted from the
change log, so expiries in the day before the oldest cut are counted too; a DataVersion that went
back before it is not known.

Cost: per ROUTE cut, broker_addr and broker_live read and, when its version moved, topic_queue's
four columns (a cut whose topic_queue version is the previous one's and whose BrokerDatas are the
same reuses the tracker's facts: nothing of topic_queue is read); one broker_live read and an
Arrow comparison per LIVE cut (about 10-20 ms each, most of it delta-rs loading the table's
version), nothing per QUIET cut. See docs/operations.md.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from conf.store import StorePath, store_path
from routeinfo.risks import RISK_QUEUE_COLUMNS, Cut, RiskReport, RiskTracker, Settings, TopicColumns
from routeinfo.snapshot import Snapshot, build_snapshot
from schemas import tables as t
from snapshots.reader import SnapshotReader, SnapshotsTable

log = logging.getLogger(__name__)

ROUTE, LIVE, QUIET = "route", "live", "quiet"
EXPIRED = "BROKER_EXPIRED"
# A move of any of these may change a risk by itself.
TOPOLOGY_VERSIONS = tuple(t.version_column(x) for x in (t.TOPIC_QUEUE, t.BROKER_ADDR, t.CLUSTER_ADDR))
CHANGES_VERSION = t.version_column(t.ROUTE_CHANGES)
LIVE_VERSION = t.version_column(t.BROKER_LIVE)
# What a risk reads of broker_live: which addresses are live (and as which id), and their DataVersions.
LIVE_COLUMNS = ("clusterName", "brokerAddr", "brokerName", "brokerId", "dataVersion")
# What a risk reads of broker_addr: the BrokerDatas (`build_snapshot` builds them from these).
ADDR_COLUMNS = ("brokerName", "brokerId", "cluster", "brokerAddr", "zoneName", "enableActingMaster")
# The tables a folded cut reads, and what `version_gone` looks at when one fails.
READ_TABLES = (t.TOPIC_QUEUE, t.BROKER_ADDR, t.BROKER_LIVE)
RETRY_S = 2.0       # a cut that failed to read while its files are all there: read again after this,
RETRY_MAX_S = 60.0  # doubling up to this,
RETRIES = 8         # and given up as gone after this many tries (about 3 minutes)
ROW_COLUMNS = ("snapshotId", "commitTime", "sourceOffsets", *(t.version_column(x) for x in t.CUT_TABLES))
CHANGE_COLUMNS = ("snapshotId", "kind", "time", "clusterName", "brokerName", "brokerAddr")


def classify(before: Mapping[str, Any] | None, row: Mapping[str, Any], route_rows: bool = True) -> str:
    """How the cut `row` differs from the cut `before` it for the risks (module docstring);
    `route_rows`: whether `row`'s cut committed change-log rows other than KV and switch ones."""
    if before is None or any(before[c] != row[c] for c in TOPOLOGY_VERSIONS):
        return ROUTE
    if route_rows and before[CHANGES_VERSION] != row[CHANGES_VERSION]:
        return ROUTE
    return LIVE if before[LIVE_VERSION] != row[LIVE_VERSION] else QUIET


def snapshot_rows(warehouse: StorePath, *, since_ms: int | None = None, after_id: int | None = None,
                  before_id: int | None = None) -> list[dict[str, Any]]:
    """`snapshots` rows committed at or after `since_ms`, with after_id < snapshotId < before_id,
    in snapshotId order (commit order): the columns a cut keeps. A table handle of its own per
    call (`SnapshotsTable`), so each call reads the table's newest version."""
    rows = SnapshotsTable(warehouse).rows_between(None if after_id is None else after_id + 1,
                                                  None if before_id is None else before_id - 1,
                                                  since_ms=since_ms, columns=ROW_COLUMNS)
    assert rows is not None  # None only past a limit, and none is given
    return rows


def first_cut_id(warehouse: StorePath) -> int | None:
    """The id of the first cut the warehouse ever committed (None: none): a fold that begins there
    has nothing before it, so no since it reads is only an upper bound. The `snapshots` table
    keeps every row; the retention removes what an old row points at, not the row."""
    path = store_path(warehouse) / t.SNAPSHOTS.name
    if not DeltaTable.is_deltatable(str(path)):
        return None
    ids = DeltaTable(str(path)).to_pyarrow_dataset().to_table(columns=["snapshotId"])["snapshotId"]
    first = pc.min(ids).as_py()
    return None if first is None else int(first)


def change_log(warehouse: StorePath, version: int, *, upto_id: int, after_id: int,
               window_from_ms: int | None = None) -> tuple[set[int], list[dict[str, Any]]]:
    """From route_changes as of its table version `version`, about the cuts after_id < snapshotId
    <= upto_id: the ids of those that committed a row about brokers or topics (not KV or a
    switch: those rows name a namespace), and the BROKER_EXPIRED rows; with `window_from_ms`, also
    the expiries of earlier cuts that happened at or after it (the window before the first cut
    folded). Read in Arrow: a registration wave's cut holds a row per queue."""
    path = store_path(warehouse) / t.ROUTE_CHANGES.name
    if not DeltaTable.is_deltatable(str(path)):
        return set(), []
    lower = pc.field("snapshotId") > after_id
    if window_from_ms is not None:
        lower = lower | ((pc.field("kind") == EXPIRED) & (pc.field("time") >= window_from_ms))
    flt = pc.field("namespace").is_null() & (pc.field("snapshotId") <= upto_id) & lower
    table = DeltaTable(str(path), version=version).to_pyarrow_dataset().to_table(columns=list(CHANGE_COLUMNS),
                                                                                 filter=flt)
    ids = pc.unique(table.filter(pc.greater(table["snapshotId"], after_id))["snapshotId"]).to_pylist()
    expired: list[dict[str, Any]] = table.filter(pc.equal(table["kind"], EXPIRED)).to_pylist()
    return set(ids), expired


def version_gone(warehouse: StorePath, table: t.TableDef, version: int) -> bool:
    """Whether `table` at `version` can no longer be read, for good: its commit has left the log
    (no commit or checkpoint file of that version in `_delta_log`: the log's cleanup) or it names a
    data file that is no longer there (VACUUM). False when everything it names is there: a read
    that failed then failed for another reason. Raises when the store cannot be asked (no answer
    either way: not gone)."""
    root = store_path(warehouse) / table.name
    logs = root / "_delta_log"
    stem = f"{version:020d}."
    if not (logs / f"{stem}json").exists() and not any(f.name.startswith(stem) for f in logs.iterdir()):
        return True
    dt = DeltaTable(str(root), version=version)
    paths = pa.table(dt.get_add_actions(flatten=True)).column("path").to_pylist()
    return any(not (root / unquote(p)).exists() for p in paths)


@dataclass(frozen=True)
class Stall:
    """A cut that failed to read while its files are all there (module docstring): read again at
    `retry_at` (monotonic)."""

    snapshot_id: int
    error: str
    tries: int
    retry_at: float

    def describe(self) -> str:
        """What an answer says while the fold waits (no countdown: it stays the same until the next try)."""
        return (f"cut {self.snapshot_id} of the history could not be read ({self.error}); its files are all "
                f"there, so this is taken for a passing fault and the cut is read again (try {self.tries} of "
                f"{RETRIES}); since is exact once it is read")


class HistoryUnreadable(Exception):
    """A fold asked to finish at once (`fold_history`) met a cut it could not read for now."""


def by_cut(rows: Sequence[Mapping[str, Any]], cut_ids: Sequence[int]) -> dict[int, list[Mapping[str, Any]]]:
    """Change rows grouped under the cut that committed them: the first of `cut_ids` (ascending)
    at or after their snapshotId (a row's snapshotId is its cut's own; older ones go to the first)."""
    out: dict[int, list[Mapping[str, Any]]] = {}
    for row in rows:
        i = bisect.bisect_left(cut_ids, row["snapshotId"])
        if i < len(cut_ids):
            out.setdefault(cut_ids[i], []).append(row)
    return out


def retention_floor(retention_ms: int, now_ms: int | None = None) -> int:
    """The oldest commit time the history still serves (`snapshots.history.History.cut`'s rule)."""
    return (int(time.time() * 1000) if now_ms is None else now_ms) - retention_ms


@dataclass
class FoldStats:
    loaded: int = 0     # cuts loaded and folded
    live_read: int = 0  # LIVE cuts whose broker_live was read
    quiet: int = 0      # cuts skipped as quiet (LIVE ones included)
    refolds: int = 0    # last quiet cut of a run, folded without a load
    restarts: int = 0   # cuts gone (vacuumed, or given up): the fold began again after them
    retries: int = 0    # reads of a cut that failed while its files were all there


class HistoryFold:
    """Folds past cuts of a warehouse into one RiskTracker, reading only the cuts that can change
    a risk (module docstring). `extend` with rows in commit order, `step` until `done`, then the
    tracker goes on with `fold` (the cuts after the history, such as the served ones). While a cut
    fails to read but is still there, `stall` says so and `step` does nothing until it is due to
    be read again (`retry_s`, doubling). One thread; `close` drops what reading kept (the
    reader's files of broker_addr and broker_live, and its table handles)."""

    def __init__(self, warehouse: StorePath, settings: Settings | None = None, *, retry_s: float = RETRY_S) -> None:
        self.warehouse = store_path(warehouse)
        self.settings = settings or Settings()
        self.tracker = RiskTracker(self.settings)
        self.stats = FoldStats()
        self.retry_s = retry_s
        self.stall: Stall | None = None
        self._reader: SnapshotReader | None = SnapshotReader(self.warehouse)
        self._topic_queue: DeltaTable | None = None  # topic_queue's handle, loaded at each version read
        self._rows: list[dict[str, Any]] = []
        self._changes: dict[int, list[Mapping[str, Any]]] = {}  # cut id -> the expiries it committed
        self._route_ids: set[int] = set()  # cuts that committed change-log rows about brokers or topics
        self._next = 0
        self._before: dict[str, Any] | None = None  # the last row stepped over (folded or quiet)
        self._snap: Snapshot | None = None          # the last cut folded (its topic_queue as TopicColumns, released)
        self._live: pa.Table | None = None          # its LIVE_COLUMNS, sorted
        self._quiet: dict[str, Any] | None = None   # the last quiet row since then
        self._origin_id: int | None = None          # the tracker's first cut

    @property
    def reader(self) -> SnapshotReader:
        if self._reader is None:
            self._reader = SnapshotReader(self.warehouse)
        return self._reader

    @property
    def last_row(self) -> Mapping[str, Any] | None:
        """The `snapshots` columns of the last cut stepped over or folded (None before any)."""
        return self._before

    @property
    def last_id(self) -> int | None:
        """The id of the last cut stepped over (folded, quiet or folded afterwards), None before any."""
        return None if self._before is None else int(self._before["snapshotId"])

    def extend(self, rows: Sequence[dict[str, Any]]) -> None:
        """Rows to step over next, in commit order (those not newer than any given before are
        left out), with what their cuts committed to the change log; the first rows given also
        bring the expiries of the window before the first of them."""
        newest = self._rows[-1]["snapshotId"] if self._rows else self.last_id
        rows = [r for r in rows if newest is None or r["snapshotId"] > newest]
        if not rows:
            return
        first, last = rows[0], rows[-1]
        ids, found = change_log(self.warehouse, last[CHANGES_VERSION], upto_id=last["snapshotId"],
                                after_id=first["snapshotId"] - 1 if newest is None else newest,
                                window_from_ms=first["commitTime"] - self.settings.window_ms if newest is None else None)
        self._route_ids |= ids
        for cut_id, rs in by_cut(found, [r["snapshotId"] for r in rows]).items():
            self._changes.setdefault(cut_id, []).extend(rs)
        self._rows.extend(rows)

    @property
    def from_first(self) -> bool:
        """Whether the tracker's first cut is the warehouse's first ever (nothing before it was
        left unread) and no cut since failed to load."""
        return self.stats.restarts == 0 and self._origin_id is not None and \
            self._origin_id == first_cut_id(self.warehouse)

    def done(self) -> bool:
        return self._next >= len(self._rows)

    def step(self) -> None:
        """Step over the next row: fold it, or skip it as quiet; while stalled and not yet due to
        read the failed cut again, nothing."""
        if self.stall is not None and time.monotonic() < self.stall.retry_at:
            return
        row = self._rows[self._next]
        try:
            self._step(row)
        except Exception as exc:
            self._failed(row, exc)
            return
        self._next += 1
        self.stall = None

    def _failed(self, row: dict[str, Any], exc: Exception) -> None:
        """A cut that failed to read: gone for good (vacuumed, cleaned up: begin again after it), or
        still there (wait and read it again, up to RETRIES tries; module docstring)."""
        cut_id = int(row["snapshotId"])
        error = f"{type(exc).__name__}: {exc}"
        try:
            gone = any(version_gone(self.warehouse, table, row[t.version_column(table)]) for table in READ_TABLES)
        except Exception as probe:  # the store does not answer: no sign that anything is gone
            log.info("risk history: could not tell whether cut %s is still there (%s: %s)", cut_id,
                     type(probe).__name__, probe)
            gone = False
        tries = self.stall.tries + 1 if self.stall is not None and self.stall.snapshot_id == cut_id else 1
        if not gone and tries < RETRIES:
            delay = min(RETRY_MAX_S, self.retry_s * 2 ** (tries - 1))
            self.stall = Stall(cut_id, error, tries, time.monotonic() + delay)
            self.stats.retries += 1
            log.warning("risk history: cut %s could not be read (%s) though its files are all there: a passing "
                        "fault, read again in %.0f s (try %d of %d); since stays exact", cut_id, error, delay, tries,
                        RETRIES)
            return
        log.warning("risk history: cut %s could not be read (%s)%s; since is read from the next cut on", cut_id, error,
                    "" if gone else f", still after {tries} tries")
        self.stall = None
        self._next += 1
        self.stats.restarts += 1
        self.tracker = RiskTracker(self.settings)
        self._snap = self._live = self._quiet = self._origin_id = None
        self._reader = None
        self._topic_queue = None
        self._before = row
        self._changes.pop(cut_id, None)
        self._route_ids.discard(cut_id)

    def _step(self, row: dict[str, Any]) -> None:
        kind = ROUTE if self._snap is None else classify(self._before, row, row["snapshotId"] in self._route_ids)
        live = None
        if kind == LIVE:
            self.stats.live_read += 1
            live = self._live_columns(row[LIVE_VERSION])
            if self._live is not None and live.equals(self._live):
                kind = QUIET
        if kind == QUIET:
            self.stats.quiet += 1
            self._quiet = row
            self._before = row
            return
        if live is None:
            live = self._live_columns(row[LIVE_VERSION])
        snap = self._cut(row, live)
        self.fold(snap, self._changes.get(row["snapshotId"], ()))
        assert isinstance(snap.topics, TopicColumns)
        snap.topics.release()  # the tracker keeps its facts; the columns go
        self._changes.pop(row["snapshotId"], None)
        self._route_ids.discard(row["snapshotId"])
        self._live = live
        self._before = row
        self.stats.loaded += 1

    def _cut(self, row: dict[str, Any], live: pa.Table) -> Snapshot:
        """The cut `row` names as the risks read it (module docstring): its topic_queue as
        TopicColumns (the last cut's when the version is the same: read again only if the tracker
        needs it), its BrokerDatas and live entries; the tables no risk reads left empty."""
        version = row[t.version_column(t.TOPIC_QUEUE)]
        last = None if self._snap is None else self._snap.topics
        topics = last if isinstance(last, TopicColumns) and last.key == version else \
            TopicColumns(version, lambda: self._topic_table(version))
        addr = self.reader.read_table(t.BROKER_ADDR, row[t.version_column(t.BROKER_ADDR)]).select(list(ADDR_COLUMNS))
        tables: dict[str, Any] = {x.name: [] for x in t.STATE_TABLES}
        tables.update({t.TOPIC_QUEUE.name: topics, t.BROKER_ADDR.name: addr.to_pylist(), t.BROKER_LIVE.name: live.to_pylist()})
        return build_snapshot(row, tables)

    def _topic_table(self, version: int) -> pa.Table:
        """topic_queue's RISK_QUEUE_COLUMNS at `version`, read whole (no copy of its files is kept)."""
        dt = self._topic_queue
        if dt is None:
            dt = self._topic_queue = DeltaTable(str(self.warehouse / t.TOPIC_QUEUE.name), version=version)
        elif dt.version() != version:
            dt.load_as_version(version)
        return dt.to_pyarrow_dataset().to_table(columns=list(RISK_QUEUE_COLUMNS))

    def refold(self) -> None:
        """Fold the last quiet cut since the last fold, as the last folded cut at its time."""
        if self._quiet is not None and self._snap is not None:
            self.tracker.fold(Cut(self._snap, (), time_ms=self._quiet["commitTime"]))
            self.stats.refolds += 1
        self._quiet = None

    def fold(self, snap: Snapshot, changes: Sequence[Mapping[str, Any]] = ()) -> RiskReport:
        """Fold a cut after the ones stepped over (a served cut, or a loaded one): the last quiet
        cut before it first."""
        self.refold()
        report = self.tracker.fold(Cut(snap, changes))
        if self._origin_id is None:
            self._origin_id = snap.snapshot_id
        self._snap, self._live = snap, None  # a loaded cut's step sets its live columns after this
        if snap.snapshot_id is not None and (self._before is None or snap.snapshot_id > self._before["snapshotId"]):
            self._before = {"snapshotId": snap.snapshot_id, "commitTime": snap.commit_time,
                            **{t.version_column(x): snap.versions.get(x.name) for x in t.CUT_TABLES}}
        return report

    def _live_columns(self, version: int) -> pa.Table:
        # the reader's own incremental read: only the files it has not read yet
        table = self.reader.read_table(t.BROKER_LIVE, version).select(list(LIVE_COLUMNS))
        return table.sort_by([(c, "ascending") for c in LIVE_COLUMNS])

    def close(self) -> None:
        """Drop the reader's files and handles and the last live columns (the tracker's state stays)."""
        self._reader = None
        self._topic_queue = None
        self._live = None
        self._rows = self._rows[self._next:]
        self._next = 0


def fold_history(warehouse: StorePath, rows: Sequence[dict[str, Any]], settings: Settings | None = None) -> HistoryFold:
    """Every row of `rows` stepped over (the cuts up to one asked about): the fold, its tracker's
    last report the answer for the last row when that row was folded (a quiet last row: `refold`).
    HistoryUnreadable when a cut fails to read while its files are all there: an answer now would
    date risks from after it, so the caller is told to ask again instead."""
    fold = HistoryFold(warehouse, settings)
    fold.extend(rows)
    while not fold.done():
        fold.step()
        if fold.stall is not None:
            raise HistoryUnreadable(fold.stall.describe())
    fold.refold()
    fold.close()
    return fold
