"""foreachBatch sink: one micro-batch → one consistent cut of Delta tables + a `snapshots` row.

Each state table gets at most one commit per batch, replacing exactly the rows of the groups
that changed (`overwrite` with a predicate on the owner column, or an append when the table holds
no row of any of them). Every commit carries the
app transaction (`namesrv-sink`, batchId); a replayed batch skips tables it already wrote
(delta-rs records but does not refuse duplicates, issue 2580). The `snapshots` row is
written last, so a reader that follows `snapshots` never sees a half-written batch.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from conf.memory import release_memory
from conf.store import StorePath, store_path
from eventlog.journal import AdminJournal
from liveness.deadlines import DeadlineBook
from pipelines import step_rows
from pipelines.batch_context import BatchContext, Lost
from pipelines.faults import no_fault
from pipelines.maintenance import MaintenanceSchedule, maintain, retention_properties
from pipelines.writer_lease import EPOCH_PROPERTY, Fenced, Lease, table_epoch
from routeinfo import housekeeping
from schemas import json_codec
from schemas import tables as t
from schemas.metrics import JobMetrics, reason_class, write_metrics_file
from schemas.progress import read_progress, write_job_start, write_progress

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

APP_ID = "namesrv-sink"
# Above this many owners a batch's replacement rewrites the table instead of naming the owners in
# an `IN (...)` predicate: delta-rs (1.6) recurses once per list element on the calling thread's
# stack, and the process dies of SIGSEGV near 21,000 elements with an 8 MiB stack (below 12,000
# with 4 MiB). A registration or expiry wave of 100,000 groups reached it. 5,000 stays under 2 MiB.
PREDICATE_OWNERS_MAX = 5_000
# route_changes kinds that record a refused registration, by rejection kind (a metric label)
REJECTION_KINDS = {"REGISTRATION_REJECTED": "rejected", "REGISTRATION_ABANDONED": "abandoned"}
log = logging.getLogger(__name__)


@dataclass
class BatchPlan:
    """What a batch's output rows ask the sink to write."""

    replace: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)  # table -> owner -> rows
    changes: list[list[Any]] = field(default_factory=list)  # route_changes rows (step_rows.CHANGE_FIELDS), in order
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    deadlines: dict[str, int | None] = field(default_factory=dict)  # group -> next timeout (None: none)

    @property
    def changes_state(self) -> bool:
        return bool(self.replace)


def plan_batch(rows: Iterable[dict[str, Any]], batch_id: int, now_ms: int) -> BatchPlan:
    """Pure: sort the step's output rows into per-table replacements and dead letters."""
    plan = BatchPlan()
    for r in rows:
        target = r["target"]
        if target == step_rows.DEAD_LETTER:
            plan.dead_letters.append({
                "value": r["raw"], "key": r["rawKey"], "reason": r["body"], "partition": r["partition"],
                "offset": r["offset"], "kafkaTimestamp": r["kafkaTimestamp"], "batchId": batch_id, "time": now_ms})
        elif target == step_rows.REJECTED:
            plan.rejected.append(f"{r['owner']}: {r['body']}")
        elif target in (step_rows.BATCH, step_rows.READ_LOSS, step_rows.READ):
            continue  # what the batch read: `batch_read`
        elif target == step_rows.DEADLINE:
            plan.deadlines[r["owner"]] = int(r["body"]) if r["body"] else None
        elif target == step_rows.ROUTE_CHANGES:
            plan.changes.extend(json_codec.loads(r["body"]))
        else:
            plan.replace.setdefault(target, {})[r["owner"]] = json_codec.loads(r["body"])
    plan.dead_letters.sort(key=lambda d: (d["partition"], d["offset"]))
    # Deterministic order: by Kafka position, expiries (no position) last, then by group.
    plan.changes.sort(key=lambda c: (c[_PARTITION] is None, c[_PARTITION] or 0, c[_OFFSET] or 0, c[_TIME],
                                     c[_BROKER] or c[_NAMESPACE] or ""))
    return plan


_PARTITION, _OFFSET, _TIME, _BROKER, _NAMESPACE, _KIND = (
    step_rows.CHANGE_FIELDS.index(name) for name in ("partition", "offset", "time", "brokerName", "namespace", "kind"))


def route_changes_table(changes: list[list[Any]], snapshot_id: int) -> pa.Table:
    """A batch's route changes, in order, as route_changes rows: `seq` is the position."""
    schema = t.ROUTE_CHANGES.schema
    columns = list(zip(*changes, strict=True)) if changes else [()] * len(step_rows.CHANGE_FIELDS)
    return pa.Table.from_arrays(
        [pa.array([snapshot_id] * len(changes), schema.field("snapshotId").type),
         pa.array(range(len(changes)), schema.field("seq").type),
         *(pa.array(column, schema.field(name).type) for name, column in zip(step_rows.CHANGE_FIELDS, columns,
                                                                             strict=True))],
        schema=schema)


@dataclass(frozen=True)
class BatchRead:
    """What a batch read, as the batch itself tells (the step's report rows): the offsets it read up
    to, how many records, what it found removed by the retention, the log resets counted so far
    and when its phases began."""

    offsets: dict[str, int]
    count: int
    lost: Lost
    resets: dict[str, int]
    times: dict[str, int]


def batch_read(rows: Iterable[dict[str, Any]], previous: dict[str, int]) -> BatchRead:
    """Pure: a batch's read from its report rows (`step_rows.BATCH`, `READ_LOSS`; with Spark's Kafka
    connector, `READ` rows reaching on from the `previous` batch's end offsets)."""
    context: BatchContext | None = None
    read_losses: Lost = []
    reach = dict(previous)
    count = 0
    for r in rows:
        if r["target"] == step_rows.BATCH:
            context, _ = BatchContext.from_json(r["body"])
        elif r["target"] == step_rows.READ_LOSS:
            p, first, end = json.loads(r["body"])
            read_losses.append((int(p), int(first), int(end)))
        elif r["target"] == step_rows.READ:
            for p, (nxt, n) in json.loads(r["body"]).items():
                reach[p] = max(reach.get(p, 0), int(nxt))
                count += int(n)
    if context is None:
        return BatchRead(reach, count, [], {}, {})
    lost = context.losses(read_losses)
    return BatchRead(dict(context.end), context.read_count(lost), lost, dict(context.resets), dict(context.times))


def lost_rows(lost: Lost, journal: AdminJournal, batch_id: int,
              now_ms: int) -> tuple[list[dict[str, Any]], list[str]]:
    """dead_letter rows for the offsets a batch found removed by the topic's retention: one for
    each range, and one for each admin write noted among them (eventlog/journal.py), the write
    itself as its value; and a log line for each range."""
    rows: list[dict[str, Any]] = []
    lines: list[str] = []
    for p, first, end in lost:
        writes = journal.between(p, first, end)
        reason = (f"lost to the events topic's retention: offsets {first}..{end - 1} of partition {p} ({end - first} "
                  f"events) were removed before the job read them; brokers' registrations among them are repaired by "
                  f"their next re-registration, {len(writes)} admin write(s) among them are listed below them")
        rows.append({"value": None, "key": None, "reason": reason, "partition": p, "offset": first,
                     "kafkaTimestamp": None, "batchId": batch_id, "time": now_ms})
        for w in writes:
            rows.append({"value": w.value, "key": w.key, "partition": p, "offset": w.offset, "kafkaTimestamp": w.time,
                         "reason": f"lost to the events topic's retention before the job read it: admin write "
                                   f"{w.describe()}, published at {w.time} ms; it was never applied, publish it again",
                         "batchId": batch_id, "time": now_ms})
        lines.append(f"partition {p} offsets {first}..{end - 1} ({end - first} events, admin writes among them: "
                     f"{'; '.join(w.describe() for w in writes) or 'none noted'})")
    return rows, lines


def _now_ms() -> int:
    return int(time.time() * 1000)


def _sql_list(values: Iterable[str]) -> str:
    return ", ".join("'" + v.replace("'", "''") + "'" for v in sorted(values))


class DeltaSink:
    """The job's only writer. Keeps one DeltaTable handle per table (delta-rs updates a handle
    on write), so a batch opens nothing it already has."""

    def __init__(self, warehouse: StorePath, *, retention_ms: int,
                 maintenance_interval_ms: int | None = None, fault: Callable[[str], None] = no_fault,
                 metrics_dir: Path | None = None, live_flush_ms: int | None = None,
                 lease: Lease | None = None) -> None:
        """`metrics_dir`: the data directory whose `metrics/job.prom` gets the job's counters after
        every batch (None: not written; tests that drive the sink alone). `live_flush_ms`: the
        job's NAMESRV_LIVE_FLUSH_MS, with which `ensure_tables` seeds the deadline book from
        broker_live (None: not seeded). `lease`: the writer's role (pipelines/writer_lease.py): checked before every write, its
        epoch on every table and commit (None: not checked; tests that drive the sink alone)."""
        self.lease = lease
        self.warehouse = store_path(warehouse)
        self.metrics = JobMetrics()
        self.metrics_dir = metrics_dir
        self.fault = fault
        self.retention_ms = retention_ms
        self.schedule = None if maintenance_interval_ms is None else MaintenanceSchedule(maintenance_interval_ms)
        self._handles: dict[str, DeltaTable] = {}
        # per state table, the owners it holds rows of, read from the table at its first replace and
        # kept by this sink's own writes (it is the tables' one writer): `_replace`
        self._owners: dict[str, set[str]] = {}
        self._latest_snapshot: int | None = None
        self._latest_cut: dict[str, Any] | None = None  # its `snapshots` row, once this instance wrote one
        self.started_ms = int(time.time() * 1000)  # this job instance's start, in every progress record
        self._force_snapshot = False  # after maintenance: re-point the newest cut at compacted versions
        # Each group's next Spark timeout as the step last reported it (seeded from broker_live at
        # start); the earliest is published in _progress.json so the source schedules a batch for it.
        self.live_flush_ms = live_flush_ms
        self.deadlines = DeadlineBook(recheck_ms=housekeeping.RECHECK_MS)
        self.journal = AdminJournal(self.warehouse)
        # the newest batch's end offsets (the journal is pruned below them; with Spark's Kafka
        # connector, a batch's records reach on from them)
        self._read_offsets: dict[str, int] = dict((read_progress(self.warehouse) or {}).get("sourceOffsets") or {})

    def path(self, table: t.TableDef) -> str:
        return str(self.warehouse / table.name)

    def announce_start(self, phases: dict[str, int] | None = None) -> None:
        """Record this job instance's start for readers (`_job.json`; see schemas.progress), with
        when its start-up phases ended (`phases`, for the timelines)."""
        write_job_start(self.warehouse, self.started_ms, phases)

    def ensure_tables(self) -> None:
        """Create every table that is missing (version 0, empty) and open the handles."""
        self.warehouse.mkdir(parents=True, exist_ok=True)
        for table in t.ALL_TABLES:
            if not DeltaTable.is_deltatable(self.path(table)):
                DeltaTable.create(self.path(table), schema=table.schema, mode="ignore", name=table.name,
                                  configuration=retention_properties(self.retention_ms))
                if self.lease is not None:  # creation takes only Delta's own properties
                    DeltaTable(self.path(table)).alter.set_table_properties(self._epoch_property(),
                                                                            raise_if_not_exists=False)
        self._handles = {table.name: DeltaTable(self.path(table)) for table in t.ALL_TABLES}
        self._owners = {}  # read from the tables again
        if self.live_flush_ms is not None:
            live = self._handles[t.BROKER_LIVE.name].to_pyarrow_dataset().to_table(
                columns=["brokerName", "lastUpdateTimestamp", "heartbeatTimeoutMillis"]).to_pydict()
            self.deadlines.seed(zip(live["brokerName"], live["lastUpdateTimestamp"], live["heartbeatTimeoutMillis"],
                                    strict=True), self.live_flush_ms)
        ids = self._handles[t.SNAPSHOTS.name].to_pyarrow_dataset().to_table(columns=["snapshotId"]).column(0)
        self._latest_snapshot = max(ids.to_pylist()) if len(ids) else None
        # A new warehouse gets its first cut (the empty tables) from the first batch, so readers
        # have a snapshot to serve, and report ready, before the first event arrives.
        self._force_snapshot = self._latest_snapshot is None

    # -- the foreachBatch callback
    def _epoch_property(self) -> dict[str, str]:
        return {} if self.lease is None else {EPOCH_PROPERTY: str(self.lease.epoch)}

    def _check_fence(self, dt: DeltaTable | None = None) -> None:
        """Refuse to write once a newer writer took over: its lease file, or its epoch on the table
        (Delta's conflict check refuses a commit prepared before the takeover either way)."""
        if self.lease is None:
            return
        self.lease.check()
        if dt is not None and table_epoch(dt.metadata().configuration) > self.lease.epoch:
            raise Fenced(f"{dt.table_uri}: a writer of epoch {table_epoch(dt.metadata().configuration)} took over "
                         f"from epoch {self.lease.epoch}")

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        self._check_fence()  # before the batch's tasks run: a fenced job plans and computes nothing more
        called = _now_ms()
        arrow = df.toArrow()  # runs the batch: the source's read, the stateful stage, its state commit
        state_done = _now_ms()
        big = arrow.nbytes > 32 * 1024 * 1024
        rows = arrow.to_pylist()
        del arrow
        read = batch_read(rows, self._read_offsets)
        self.commit(batch_id, rows, read.offsets, read.count, phases={**read.times, "sinkCalled": called,
                                                                      "stateDone": state_done},
                    resets=read.resets, lost=read.lost)
        if big:  # a registration wave: do not keep its peak as RSS
            del rows
            release_memory()
        if self.schedule is not None and self.schedule.due():
            self.maintain()
        self.fault("after:batch")  # written, not yet in Spark's commit log

    def maintain(self) -> None:
        self._check_fence()
        report = maintain(str(self.warehouse), self.retention_ms)
        try:
            pruned = self.journal.prune(self._read_offsets)
        except Exception as exc:  # the store refused (HDFS: safe mode, permissions): the notes wait for the next maintenance
            pruned = 0
            log.warning("admin write notes in %s not pruned: %s", self.journal.root, exc)
        self.metrics.maintenance.inc()
        self.metrics.maintenance_seconds.observe(report.seconds)
        if self.schedule is not None:
            self.schedule.done()
        for handle in self._handles.values():
            handle.update_incremental()
        self._force_snapshot = True
        log.info("maintenance in %.1f s: %s; %d admin write note(s) read past removed", report.seconds,
                 report.per_table, pruned)

    def commit(self, batch_id: int, rows: list[dict[str, Any]], offsets: dict[str, int], consumed: int, *,
               phases: dict[str, int] | None = None, resets: dict[str, int] | None = None,
               lost: Lost | None = None) -> None:
        """Write one batch's cut; `offsets` are the source offsets it read up to, `consumed` how many,
        `resets` how many times each partition's log went back under the job (`offset_log.RESETS`),
        `lost` the offsets it found removed by the topic's retention (`batch_losses`: named in
        dead_letter and the log, counted), `phases` when its earlier phases ended (epoch ms;
        completed here and kept in the progress record, whose `phases` are one batch's timeline:
        schemas/progress.py).

        A `snapshots` row is written only when a cut table changed (or, once after maintenance,
        to point readers at the compacted, checkpointed versions); every batch then records its
        progress (offsets, newest snapshot) in `_progress.json`, which is how a reader knows that
        its served snapshot already includes events that changed nothing (a quiet heartbeat).
        """
        if not self._handles:
            self.ensure_tables()
        started = time.time()
        plan = plan_batch(rows, batch_id, int(started * 1000))
        if lost:
            named, lines = lost_rows(lost, self.journal, batch_id, int(started * 1000))
            plan.dead_letters[:0] = named
            for line in lines:
                log.warning("batch %d: events lost to the topic's retention (the job was down longer than it keeps "
                            "events): %s", batch_id, line, extra={"batchId": batch_id})
        for reason in plan.rejected:
            log.warning("registration rejected in batch %d: %s", batch_id, reason,
                        extra={"batchId": batch_id, "brokerName": reason.split(":", 1)[0]})
        if plan.dead_letters:
            self._write(t.DEAD_LETTER, t.DEAD_LETTER.from_rows(plan.dead_letters), batch_id, predicate=None,
                        mode="append")
            log.warning("batch %d: %d record(s) quarantined in dead_letter, first reason: %s",
                        batch_id, len(plan.dead_letters), plan.dead_letters[0]["reason"], extra={"batchId": batch_id})
        writes: list[Callable[[], None]] = [
            partial(self._replace, table, plan.replace[table.name], batch_id)
            for table in t.STATE_TABLES if plan.replace.get(table.name)]
        if plan.changes:
            writes.append(partial(self._write, t.ROUTE_CHANGES, route_changes_table(plan.changes, batch_id), batch_id,
                                  predicate=None, mode="append"))
        self._side_by_side(writes)
        phases = {**(phases or {}), "tablesDone": _now_ms()}
        if plan.changes_state or plan.changes or self._force_snapshot:
            snapshot = {"snapshotId": batch_id, "batchId": batch_id, "commitTime": int(time.time() * 1000),
                        "sourceOffsets": json.dumps(offsets, sort_keys=True), "eventCount": consumed}
            for table in t.CUT_TABLES:
                snapshot[t.version_column(table)] = self._handles[table.name].version()
            self._write(t.SNAPSHOTS, t.SNAPSHOTS.from_rows([snapshot]), batch_id, predicate=None, mode="append")
            self._latest_snapshot, self._latest_cut = batch_id, snapshot
            self._force_snapshot = False
            self.metrics.snapshots.inc()
            phases["cutDone"] = _now_ms()
            log.info("batch %d: %d record(s), tables %s, %d change(s), %.0f ms", batch_id, consumed,
                     ",".join(sorted(plan.replace)) or "-", len(plan.changes), (time.time() - started) * 1000,
                     extra={"batchId": batch_id, "snapshotId": batch_id})
        done_ms = int(time.time() * 1000)
        self.deadlines.update(plan.deadlines, done_ms)
        self.fault("before:progress")
        self._check_fence()
        self._count(plan, consumed, done_ms / 1000 - started, lost or [])
        self._read_offsets = dict(offsets)
        write_progress(self.warehouse, {"batchId": batch_id, "snapshotId": self._latest_snapshot,
                                        "sourceOffsets": offsets, "resets": resets or {}, "time": done_ms,
                                        "eventCount": consumed,
                                        "nextDeadline": self.deadlines.next_deadline(),
                                        "jobStartedAt": self.started_ms, "phases": phases,
                                        **({"cut": self._latest_cut} if self._latest_cut else {})})

    def _side_by_side(self, writes: list[Callable[[], None]]) -> None:
        """Each table's commit of a batch at once: they are independent (each its own Delta log), and
        delta-rs lets go of the GIL while it writes and commits, so four tables took about as long
        as one instead of four times as long (docs/latency.md). All end, or the first error is
        raised after every write ended, before the `snapshots` row, which still comes last."""
        if len(writes) <= 1:
            for write in writes:
                write()
            return
        with ThreadPoolExecutor(max_workers=len(writes), thread_name_prefix="sink-write") as pool:
            futures = [pool.submit(write) for write in writes]
        for future in futures:
            future.result()

    def _count(self, plan: BatchPlan, consumed: int, seconds: float, lost: Lost) -> None:
        """The batch in the job's metrics, written to its metrics file (schemas.metrics)."""
        m = self.metrics
        for p, first, end in lost:
            m.events_lost.labels(str(p)).inc(end - first)
        m.batches.inc()
        m.records.inc(consumed)
        m.batch_records.observe(consumed)
        m.batch_seconds.observe(seconds)
        for kind, count in Counter(change[_KIND] for change in plan.changes).items():
            m.changes.labels(kind).inc(count)
            if kind in REJECTION_KINDS:
                m.rejections.labels(REJECTION_KINDS[kind]).inc(count)
        for dead in plan.dead_letters:
            m.dead_letters.labels(reason_class(dead["reason"])).inc()
        if self._latest_snapshot is not None:
            m.last_snapshot.set(self._latest_snapshot)
        m.last_batch.set(time.time())
        if self.metrics_dir is not None:
            try:
                write_metrics_file(self.metrics_dir, "job", m.registry)
            except OSError as exc:  # metrics are not worth a failed batch
                log.warning("job metrics not written: %s", exc)

    def _replace(self, table: t.TableDef, owners: dict[str, list[dict[str, Any]]], batch_id: int) -> None:
        """Replace every row of `owners` in `table` by their new rows, in one commit either way. When
        the table holds no row of any of them (a registration wave's new groups) the rows are
        appended: an overwrite's predicate is checked against every data file whose statistics
        cannot rule its owners out, and a batch's owners span the whole name range, so at 100,000
        brokers each wave batch read the whole table to delete nothing."""
        data = table.from_rows([row for rs in owners.values() for row in rs])
        held = self._held_owners(table)
        try:
            if held.isdisjoint(owners):
                self._write(table, data, batch_id, predicate=None, mode="append")
            elif len(owners) <= PREDICATE_OWNERS_MAX:
                self._write(table, data, batch_id, predicate=f"{table.owner} IN ({_sql_list(owners)})",
                            mode="overwrite")
            else:
                current = self._handles[table.name].to_pyarrow_dataset().to_table().cast(table.schema)
                kept = current.filter(pc.invert(pc.is_in(current[table.owner],
                                                         value_set=pa.array(list(owners), pa.string()))))
                log.info("batch %d: %d owners of %s replaced by rewriting the table (%d rows kept)", batch_id,
                         len(owners), table.name, kept.num_rows, extra={"batchId": batch_id})
                self._write(table, pa.concat_tables([kept, data]), batch_id, predicate=None, mode="overwrite")
        except BaseException:
            # a write that failed may have committed all the same: the table is read again next time
            self._owners.pop(table.name, None)
            raise
        held.update(owner for owner, rows in owners.items() if rows)
        held.difference_update(owner for owner, rows in owners.items() if not rows)

    def _held_owners(self, table: t.TableDef) -> set[str]:
        """The owners `table` holds rows of (read once from its current version, then kept)."""
        held = self._owners.get(table.name)
        if held is None:
            assert table.owner is not None, f"{table.name} is append-only"
            column = self._handles[table.name].to_pyarrow_dataset().to_table(columns=[table.owner]).column(0)
            held = self._owners[table.name] = set(pc.unique(column).to_pylist())
        return held

    def _write(self, table: t.TableDef, data: pa.Table, batch_id: int, *, predicate: str | None,
               mode: Literal["append", "overwrite"]) -> None:
        self.fault(f"before:{table.name}")
        dt = self._handles[table.name]
        self._check_fence(dt)
        done = dt.transaction_version(APP_ID)
        if done is not None and done >= batch_id:
            log.info("batch %d already committed to %s; skipped", batch_id, table.name)
            return
        commit = CommitProperties(app_transactions=[Transaction(APP_ID, batch_id)],
                                  custom_metadata=self._epoch_property() or None)
        if mode == "overwrite":
            write_deltalake(dt, data, mode="overwrite", predicate=predicate, commit_properties=commit)
        else:
            write_deltalake(dt, data, mode="append", commit_properties=commit)
