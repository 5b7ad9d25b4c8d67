"""The streaming job's Kafka source on Spark's Python data source API (I/O only).

One input partition per Kafka partition; offsets are `{"<partition>": next offset}` plus the
virtual `tick` (see `admission`). The engine asks for at most `maxRecordsPerBatch` records per
micro-batch (admission control, Spark 4.2), shared evenly between partitions; whether a
trigger runs a batch at all is `admission.decide`'s call, with the waiting records scanned here.

A broker that is unreachable means "no new data" until it is back; a log that went backwards
(a memory-only broker restarted) is read again from its beginning. Kafka I/O shared with
the rest of the system (topic creation, the consumer settings, Tansu's end-offset quirk) is
in `eventlog`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from conf.memory import release_memory
from conf.store import store_path
from eventlog.consumer import consumer, record_time, true_end
from eventlog.topics import ensure_topic
from liveness import admission
from liveness.admission import TICK, Backlog
from liveness.ledger import LivenessLedger
from liveness.watch import WaitingRecords
from pipelines import buckets as bk
from pipelines import state_layout
from pipelines.batch_context import CONTEXT_PARTITION, LOSS_PARTITION, BatchContext, loss_row_value
from pipelines.buckets import IMPORT_PARTITION
from pipelines.log_outage import GONE_CONFIRM_S, LogOutage, ShortLogs
from pipelines.offset_log import LOG_CLOCK, LOST, RESETS, RESUMED, LogClock, log_resets, lost_ranges
from pipelines.state_layout import IMPORT_OFFSET, LAYOUT
from pipelines.writer_lease import Lease
from schemas.events import FINGERPRINT_HEADER, TYPE_HEADER, header_fingerprint
from schemas.progress import read_progress

SOURCE_NAME = "namesrv_kafka"


RAW_SCHEMA = "partition int, offset long, timestamp long, key string, value binary"

log = logging.getLogger(__name__)


def _read_import(partition: StateImport) -> Iterator[tuple[Any, ...]]:
    for i, row in enumerate(state_layout.read_import(store_path(partition.path))):
        yield (IMPORT_PARTITION, i, 0, row["key"], json.dumps([row["core"], row["topics"]]).encode())


def count_resets(start: dict, end: dict) -> dict[str, int]:
    """The log resets carried in `start` (`offset_log.RESETS`), with one more for each partition
    whose offset goes back in the batch from `start` to `end`: offsets go back only when a log reset
    is believed (`ShortLogs`), and the batch then reads that partition's log from its start."""
    resets = log_resets(start)
    for p, e in end.items():
        if admission.is_partition(p) and p in start and int(e) < int(start[p]):
            resets[p] = resets.get(p, 0) + 1
    return resets


@dataclass
class KafkaRange(InputPartition):
    """Offsets [start, end) of one partition; every record read there was appended after `since`
    and no later than `until` (the log clock of the previous batch and of this one; None: not
    known), and is read with its time bounded so (`offset_log.LogClock.receive_time`)."""

    partition: int
    start: int
    end: int
    since: int | None = None
    until: int | None = None
    # The batch's context rows, read by this range's task ahead of its records (`partitions`).
    context: ContextRows | None = None

    def clock(self) -> LogClock:
        return LogClock(since={} if self.since is None else {self.partition: self.since},
                        until={} if self.until is None else {self.partition: self.until})


@dataclass
class ContextRows(InputPartition):
    """The batch's context (`pipelines/batch_context.py`), read as one row per bucket key."""

    context: BatchContext
    layout: bk.Layout

    def rows(self) -> Iterator[tuple[Any, ...]]:
        reported, plain = self.context.to_json(report=True), self.context.to_json()
        for n, key in enumerate(self.layout.keys):
            yield (CONTEXT_PARTITION, n, 0, key, reported if n == 0 else plain)


@dataclass
class StateImport(InputPartition):
    """Buckets' state moved from another layout of the checkpoint (pipelines/state_layout.py)."""

    path: str


# One consumer per bootstrap in each Python worker process, kept across tasks (Spark reuses its
# workers): connecting and fetching metadata per partition per micro-batch was most of the
# source's cost. Process-local and rebuilt after any error, so it holds no state that matters.
_READERS: dict[str, Any] = {}

_SCAN_LIMIT = 5000  # waiting records looked at, at most, to tell liveness signals from changes
# A batch that runs anyway: the records it reads are looked at first (so the ledger goes on knowing
# the log) only when at most this many were not looked at yet. Past it the ledger starts over
# (`WaitingRecords.consumed`), which changes when later records are read, never what they do: a
# first-registration wave's batch of 3,380 64-KB registrations took the planner 1.9 s to fetch and
# decode, and every one of them was a change anyway.
_OBSERVE_RUNNING_LIMIT = 1000
_MIN_WAIT_S = 0.02  # less of a trigger than this left: not worth a wait for records
# The longest one look waits for a change: a query being stopped waits for the look to end (Spark
# cannot interrupt the source's Python process), so a longer trigger looks again at its next start.
MAX_WAIT_S = 10.0
# How often the planner asks where each partition's log begins (the topic's retention moves it): a
# batch whose start is below it names what it lost (`LOST`); a read that finds more gone says so.
LOG_START_TTL_S = 10.0
# A trigger that runs no batch looks for records for at least this many fetch waits
# (NAMESRV_KAFKA_FETCH_WAIT_MS) before it hands back to Spark: each trigger costs a call of this
# source from Spark's JVM and a look at the log's end offsets, so an idle job's triggers are rare.
LOOK_FETCHES = 4
# ... but for no longer than this unless the trigger interval is longer: a query being stopped
# waits for the look. A fetch longer than the look (Apache Kafka's 2.5 s) stays in flight into the
# next trigger's look, which polls the same consumer from the same position.
LOOK_MAX_S = 2.0
# How long a fetch of the planner's consumer waits at the broker (`KafkaStreamReader._client`).
SCAN_FETCH_WAIT_MS = 10
# The longest stretch before a look's end that is slept rather than polled (`_await_change`).
LAST_STRETCH_S = 0.1
# How long a range read's poll waits for the answer of its fetch (which stays in flight after).
READ_POLL_MS = 500
# How long a range read's polls bring nothing before it asks whether the records are still there
# (`_after_empty_poll`, whose look at the log's end seeks, and a seek drops the fetch in flight).
# Asked after every empty poll, on a loaded host where a fetch's answer came later than a poll
# waits, every answer was dropped: reads of 2,500 records took 10-20 s, and saw nothing for 5 s
# and marked outages of a log that was answering (100,000 brokers, by hand, 2026-11-29).
READ_CHECK_S = 2.0
# A batch's read of a range fails when none of its records came for this long (the log's broker
# gone): the job restarts and reads it again.
READ_STUCK_S = 120.0
# A range read longer than this is logged with its offsets and time.
SLOW_READ_S = 10.0


def _reader_consumer(bootstrap: str) -> Any:
    c = _READERS.get(bootstrap)
    if c is None:
        c = _READERS[bootstrap] = consumer(bootstrap, offset_reset="none")
    return c


def warm_reader(bootstrap: str, topic: str) -> None:
    """Connect this worker's reader consumer to the topic's partition leaders ahead of its first
    read (`pipelines.job.warm_python_workers`): a new consumer's first fetch waits for metadata
    and a connection to the leader, about 0.2 s on Tansu and 0.5-0.7 s in the read task of the
    first batch each worker reads in (Spark's event log), which a starting fleet's first
    registrations wait for. Once per worker process: a consumer it already has is warm."""
    from kafka import TopicPartition
    if bootstrap in _READERS:
        return
    c = _reader_consumer(bootstrap)
    parts = c.partitions_for_topic(topic)  # none before the job created the topic: the connection is made
    if parts:
        c.end_offsets([TopicPartition(topic, p) for p in sorted(parts)])


def _drop_reader_consumer(bootstrap: str) -> None:
    c = _READERS.pop(bootstrap, None)
    if c is not None:
        try:
            c.close()
        except Exception:  # closing a broken connection must not hide the original error
            pass


class KafkaEventSource(DataSource):
    """Options (all required): bootstrap, topic, partitions and topicConfigs (JSON: when creating
    the topic), maxRecordsPerBatch, stateLayout (`buckets.Layout.tag`: the keys every batch's context reaches), leaseDir
    and writerEpoch (the writer's role the job holds: no batch is planned once it is taken over;
    empty: not checked), heartbeatDeferMs, fetchWaitMs (NAMESRV_KAFKA_FETCH_WAIT_MS), triggerIntervalMs
    (the pace of batches no change asks for), brokerTimeoutMs (NAMESRV_BROKER_TIMEOUT_MS, for telling
    liveness signals from changes), progressDir (where the sink writes `_progress.json`),
    stateImport (a file of buckets' state a batch hands the step first; empty: none) and layoutDir
    (where the state's layout is recorded once the import committed: the checkpoint directory)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return RAW_SCHEMA

    def streamReader(self, schema: Any) -> KafkaStreamReader:
        return KafkaStreamReader(dict(self.options))


class KafkaStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        options = {k.lower(): v for k, v in options.items()}  # Spark hands option names over lower-cased
        self.bootstrap = options["bootstrap"]
        self.topic = options["topic"]
        # Every option is required: the job passes its configuration (no second set of defaults).
        self.create_partitions = int(options["partitions"])
        self.topic_configs: dict[str, str] = json.loads(options["topicconfigs"])
        self.max_records = int(options["maxrecordsperbatch"])
        self.layout = bk.Layout.of_tag(options["statelayout"])
        self._consumer = None
        self._watcher = None  # the look for records' own consumer (`_watch_client`)
        self._ends: dict[int, tuple[int, int]] = {}  # partition -> (reported end, true end)
        self._short = ShortLogs()  # partitions whose end looks behind the consumed offset
        # Batch admission (see `_admit`): heartbeats may wait up to defer_ms for company.
        self.defer_ms = int(options["heartbeatdeferms"])
        # The trigger interval paces the batches that no change asks for (`admission.decide`), and
        # a trigger that runs no batch waits this long for one (`latestOffset`): the interval or
        # LOOK_FETCHES fetch waits up to LOOK_MAX_S, at most MAX_WAIT_S (a stopping query waits
        # for the source's answer). It wakes when admission may decide otherwise (`admission.next_look_ms`), so the
        # wait delays nothing. The query runs its triggers back to back (`pipelines/job.py`), so
        # these waits are its only pacing.
        self.pace_ms = int(options["triggerintervalms"])
        # How long a fetch of the trigger's look for records waits at the broker (`_await_change`):
        # on Tansu up to this much is added to a change's latency (conf: NAMESRV_KAFKA_FETCH_WAIT_MS).
        self.fetch_wait_ms = int(options["fetchwaitms"])
        self.wait_s = min(max(self.pace_ms / 1000, min(LOOK_FETCHES * self.fetch_wait_ms / 1000, LOOK_MAX_S)),
                          MAX_WAIT_S)
        # the job's progress record's directory (the warehouse); none when the source runs alone
        self.progress_dir = store_path(options["progressdir"]) if options["progressdir"] else None
        self._outage = LogOutage(self.bootstrap, self.progress_dir)  # the log's outages and their floor
        self.lease = Lease(store_path(options["leasedir"]), int(options["writerepoch"])) if options["leasedir"] else None
        self.state_import = options["stateimport"] or None
        # A replayed batch planned under another layout hands the import over (`partitions`): the
        # batch after it must not hand it over again. Then the batch that did, once committed,
        # records the layout (`commit`).
        self._imported_in: dict | None = None
        self.layout_dir = store_path(options["layoutdir"]) if options["layoutdir"] else None
        self._trigger_ms: int | None = None  # when the newest trigger began (latestOffset was called)
        self._last_run = 0.0
        # What the ledger said of the records waiting to be read (see `_scan_pending`).
        self._waiting = WaitingRecords(LivenessLedger(default_timeout_ms=int(options["brokertimeoutms"])))
        self._starts: tuple[float, dict[int, int]] | None = None  # (when asked, where each partition's log begins)

    # -- driver side
    def _tps(self) -> list[Any]:
        from kafka import TopicPartition
        c = self._client()
        parts = c.partitions_for_topic(self.topic)
        if not parts:
            ensure_topic(self.bootstrap, self.topic, self.create_partitions, self.topic_configs)
            c.topics(exclude_internal_topics=True)  # refresh metadata
            parts = c.partitions_for_topic(self.topic) or set()
        return [TopicPartition(self.topic, p) for p in sorted(parts)]

    def _client(self) -> Any:
        """The planner's consumer: end offsets, record times, scans of records known to be there.
        Its fetches wait at the broker only SCAN_FETCH_WAIT_MS: a broker answers one connection's
        requests in order, so a plan's request queued behind a fetch waiting for records that do not
        come would wait out that fetch (`_watch_client` has the long waits)."""
        if self._consumer is None:
            self._consumer = consumer(self.bootstrap, fetch_max_wait_ms=SCAN_FETCH_WAIT_MS, offset_reset="earliest")
        return self._consumer

    def _watch_client(self) -> Any:
        """The consumer of the trigger's look for new records (`_await_change`), on its own
        connection: its fetches wait up to `fetch_wait_ms` at the broker for a record to arrive."""
        if self._watcher is None:
            self._watcher = consumer(self.bootstrap, fetch_max_wait_ms=self.fetch_wait_ms, offset_reset="earliest")
        return self._watcher

    def initialOffset(self) -> dict:
        ensure_topic(self.bootstrap, self.topic, self.create_partitions, self.topic_configs)
        begins = self._client().beginning_offsets(self._tps())
        return {**{str(tp.partition): off for tp, off in begins.items()}, TICK: 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_records)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end offsets of the next batch, or `start` (no batch). A trigger that would run no
        batch waits, for up to the trigger interval, for what would run one (a record that is not a
        liveness signal, a full batch, the earliest group timeout) and then runs it at once: a
        change that arrives mid-trigger is not held until the next trigger (docs/latency.md)."""
        if self.lease is not None:
            self.lease.check()  # a fenced job plans no batch (the job leaves when it sees it)
        self._trigger_ms = int(time.time() * 1000)
        until = time.monotonic() + self.wait_s
        while True:
            out = self._latest(start, limit)
            left = until - time.monotonic()
            if out != start or self._outage.unavailable or left < _MIN_WAIT_S:
                return out
            waited = time.monotonic()
            try:
                self._await_change(start, left)
            except Exception as exc:  # the next look reports an unreachable broker
                log.debug("waiting for records failed: %s", exc)
                return out
            self._outage.slow(time.monotonic() - waited - left, "a wait for records")

    def _await_change(self, start: dict, seconds: float) -> None:
        """Block up to `seconds`, or until admission may decide otherwise without a record (the
        pace, a waiting signal's deferral, the earliest group timeout: `admission.next_look_ms`,
        asked again as records arrive), for a record the ledger does not call a liveness signal or
        for a full batch. Records that arrive meanwhile go through the ledger here (`_look`), so
        the next look scans nothing twice. A fetch waits at most `fetch_wait_ms` at the broker."""
        from kafka import TopicPartition
        if not self._ends:
            return
        deadline = self._next_deadline()  # no batch runs during the wait: read once
        until = min(time.monotonic() + seconds, self._wake(start, deadline))
        c = self._watch_client()
        tps = [TopicPartition(self.topic, p) for p in sorted(self._ends)]
        c.assign(tps)
        for tp in tps:
            c.seek(tp, self._waiting.look_from(tp.partition, int(start.get(str(tp.partition), 0))))
        stretch = min(self.fetch_wait_ms / 1000, LAST_STRETCH_S)
        while (left := until - time.monotonic()) > 0:
            if left <= stretch:
                # A poll can outlast its timeout by a fetch's wait at the broker: the last stretch
                # before a group's deadline is slept, so its batch is not late by that much. At most
                # LAST_STRETCH_S: a record arriving meanwhile waits for the stretch to end.
                time.sleep(left)
                return
            urgent = False
            wait_ms = max(1, int((left - stretch) * 1000))
            for tp, records in c.poll(timeout_ms=wait_ms, max_records=_SCAN_LIMIT).items():
                for rec in records:
                    urgent = self._look(tp.partition, rec) is False or urgent
            if urgent or self._waiting.waiting(start) >= self.max_records:
                return
            until = min(until, self._wake(start, deadline))

    def _wake(self, start: dict, deadline: int | None) -> float:
        """The monotonic time at which admission may run a batch without another record
        (`admission.next_look_ms`, given what waits now and the earliest group `deadline`)."""
        now_ms = time.time() * 1000
        pending = admission.pending_ranges(start, {str(p): e for p, (_, e) in self._ends.items()})
        oldest = self._waiting.backlog(pending).oldest_heartbeat_ms if pending else None
        wake = admission.next_look_ms(now_ms, last_run_ms=self._last_run, pace_ms=self.pace_ms,
                                      deadline_ms=deadline, defer_ms=self.defer_ms,
                                      pending=bool(pending), oldest_signal_ms=oldest)
        return time.monotonic() + max(0.0, (wake - now_ms) / 1000)

    def _look(self, partition: int, rec: Any) -> bool | None:
        """Hand a fetched record to the ledger's bookkeeping (`liveness.watch`)."""
        headers = dict(rec.headers or ())
        kind = headers[TYPE_HEADER].decode("utf-8", "replace") if TYPE_HEADER in headers else None
        key = rec.key.decode("utf-8", "replace") if rec.key is not None else None
        return self._waiting.look(partition, rec.offset, key, kind, rec.value, rec.timestamp,
                                  header_fingerprint(headers.get(FINGERPRINT_HEADER)))

    def _latest(self, start: dict, limit: ReadLimit) -> dict:
        asked = time.monotonic()
        try:
            ends = self._ends_now()
        except Exception as exc:  # broker unreachable or restarting: no new data this trigger
            self._outage.lost(f"unavailable ({type(exc).__name__}: {exc}); waiting for it, no new data meanwhile")
            self.stop()
            self._ends.clear()
            return dict(start)
        self._outage.slow(time.monotonic() - asked, "the log's end offsets")
        self._outage.looked()
        budget = None
        if isinstance(limit, ReadMaxRows):
            budget = max(1, limit.max_rows // max(1, len(ends)))
        elif not isinstance(limit, ReadAllAvailable):
            budget = self.max_records
        out = {}
        starts = self._log_starts()
        for p, end in ends.items():
            s = int(start.get(str(p), 0))
            if end < s:
                # The log went backwards (a memory-only broker restarted): once that is believed
                # (`ShortLogs`), the next batch reads the new log from its beginning (see
                # `partitions`); until then the partition waits.
                if not self._short.believed(p):
                    self._client()._client.cluster.request_update()  # ask who leads now
                    out[str(p)] = s
                    continue
                log.warning("%s[%d]: end offset %d is behind the consumed offset %d for %.0f s; the log was "
                            "reset, reading it from the beginning", self.topic, p, end, s, GONE_CONFIRM_S)
                out[str(p)] = end
                continue
            self._short.clear(p)
            # a batch's budget is spent on what the log still holds: what the retention removed
            # before the job read it is named in one batch, not stepped over a budget at a time
            first = max(s, starts.get(p, s))
            out[str(p)] = end if budget is None or end <= first else min(end, first + budget)
        # A partition that vanished keeps its position; the engine requires monotone offsets.
        for p, off in start.items():
            if admission.is_partition(p):
                out.setdefault(p, off)
        return self._admit(start, out, ends)

    def _admit(self, start: dict, out: dict, ends: dict[int, int]) -> dict:
        """Run a batch up to `out`, or not (return `start`): `admission.decide` rules, except that
        a pending state import runs at once. A batch that runs carries its log clock
        (`offset_log.LOG_CLOCK`) and the import file, once there was one (`state_layout`)."""
        now = time.time() * 1000
        pending = admission.pending_ranges(start, out)
        lost = self._lost(pending)
        for p, (_, first) in lost.items():  # what is left of the log is what the batch reads and admission weighs
            pending[p] = (first, pending[p][1])
        importing = self.state_import is not None and self._imported_in is None \
            and start.get(IMPORT_OFFSET) != self.state_import
        waiting = sum(max(0, end - int(start.get(str(p), 0))) for p, end in ends.items())  # all of it, not capped
        run = importing or bool(lost) or admission.decide(
            now, defer_ms=self.defer_ms, last_run_ms=self._last_run, pending=bool(pending),
            backlog=lambda: self._scan_pending(pending), next_deadline=self._next_deadline,
            waiting_records=waiting, full_batch=self.max_records, pace_ms=self.pace_ms)
        if run:
            self._last_run = now
            if self._waiting.unobserved(pending) <= _OBSERVE_RUNNING_LIMIT:
                self._observe(pending)  # whichever rule decided, the ledger looks at what the batch will read
            self._waiting.consumed({int(p): int(o) for p, o in out.items() if admission.is_partition(p)})
            out = {**out, LOG_CLOCK: self._log_clock(start, out, ends, int(now)), LAYOUT: self.layout.tag}
            floors = [int(f) for f in (start.get(RESUMED), self._outage.resumed) if f is not None]
            if floors:
                out[RESUMED] = max(floors)
            resets = count_resets(start, out)
            if resets:
                out[RESETS] = resets
            if lost:
                # What the lost records said of each broker is unknown: like an outage of the log, no
                # broker is judged silent for it, each gets a full timeout from now (its re-registrations,
                # which the log still holds, arrive meanwhile), and the floor goes out with this batch.
                out[RESUMED] = max(int(out.get(RESUMED, 0)), int(now))
                out[LOST] = {str(p): [s, first] for p, (s, first) in sorted(lost.items())}
                for p, (s, first) in sorted(lost.items()):
                    log.warning("%s[%d]: offsets %d..%d (%d events) were removed by the topic's retention before the "
                                "job read them; the batch reads from %d, and names what was lost in dead_letter",
                                self.topic, p, s, first - 1, first - s, first)
            carried = self.state_import if importing else start.get(IMPORT_OFFSET)
            if carried is not None:
                out[IMPORT_OFFSET] = carried
        return admission.offsets_to_run(start, out, run=run)

    def _log_starts(self) -> dict[int, int]:
        """Where each partition's log begins (the topic's retention moves it), asked at most every
        LOG_START_TTL_S (a read finds what went meanwhile, `read`); not known: empty."""
        if self._starts is None or time.monotonic() - self._starts[0] > LOG_START_TTL_S:
            try:
                begins = self._client().beginning_offsets(self._tps())
            except Exception as exc:  # the broker went away: judged at the next look
                log.debug("where the log begins could not be asked: %s", exc)
                return {}
            self._starts = (time.monotonic(), {tp.partition: int(o) for tp, o in begins.items()})
        return self._starts[1]

    def _lost(self, pending: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
        """Partition -> (first, log start) where a pending range begins before the log does now:
        offsets the retention removed before the job read them."""
        if not pending:
            return {}
        starts = self._log_starts()
        return {p: (s, min(starts[p], e)) for p, (s, e) in pending.items() if p in starts and s < starts[p] and s < e}

    def _log_clock(self, start: dict, out: dict, ends: dict[int, int], now_ms: int) -> dict[str, int]:
        """Per partition: `now` when the batch reads it to its end; while it lags, the record time of
        the newest record the batch reads there, so that expiry judges a backlog by how far the job
        has read, not by the wall clock. Never behind the previous batch's clock; if the record
        cannot be read, the previous clock stands."""
        previous = start.get(LOG_CLOCK)
        before = previous if isinstance(previous, dict) else {}
        clock: dict[str, int] = {}
        for p, o in out.items():
            if not admission.is_partition(p):
                continue
            t: int | None = now_ms
            if int(p) in ends and int(o) < ends[int(p)]:
                try:
                    t = self._record_time(int(p), int(o) - 1) if int(o) > 0 else None
                except Exception as exc:  # a failed look keeps the clock where it was
                    log.warning("could not read the log clock of partition %s (%s: %s); keeping the previous one",
                                p, type(exc).__name__, exc)
                    t = None
                t = None if t is None else min(t, now_ms)
            prev = before.get(p)
            if t is None:
                t = int(prev) if prev is not None else None
            if t is not None:
                clock[p] = t if prev is None else max(int(prev), t)
        return clock

    def _record_time(self, partition: int, offset: int) -> int | None:
        from kafka import TopicPartition
        return record_time(self._client(), TopicPartition(self.topic, partition), offset)

    def _next_deadline(self) -> int | None:
        if self.progress_dir is None:
            return None
        deadline: int | None = (read_progress(self.progress_dir) or {}).get("nextDeadline")
        return deadline

    def _scan_pending(self, pending: dict[int, tuple[int, int]]) -> Backlog:
        """Whether any waiting record is not a liveness signal, and the oldest waiting signal's time
        (`liveness.watch`); a range the ledger could not look at in full counts as urgent."""
        if not self._observe(pending):
            return Backlog(urgent=True, oldest_heartbeat_ms=None)
        return self._waiting.backlog(pending)

    def _observe(self, pending: dict[int, tuple[int, int]]) -> bool:
        """Run every waiting record not looked at yet through the ledger, once, in log order, and
        keep its verdict (`liveness.watch`). False when a range went backwards (log reset) or is too long
        to be worth looking at (the ledger, which will not have seen it, starts over when it is
        read, `WaitingRecords.consumed`)."""
        from kafka import TopicPartition
        for p, (s, e) in sorted(pending.items()):
            upto = self._waiting.look_from(p, s, reset=e < s)
            if e < s or e - upto > _SCAN_LIMIT:
                return False
            if upto >= e:
                continue
            c = self._client()
            tp = TopicPartition(self.topic, p)
            c.assign([tp])
            c.seek(tp, upto)
            deadline = time.monotonic() + 2
            while self._waiting.observed[p] < e and time.monotonic() < deadline:
                for rec in c.poll(timeout_ms=200, max_records=_SCAN_LIMIT).get(tp, []):
                    if rec.offset < e:
                        self._look(p, rec)
        return True

    def _ends_now(self) -> dict[int, int]:
        tps = self._tps()
        reported = self._client().end_offsets(tps)
        ends = {}
        for tp, off in reported.items():
            cached = self._ends.get(tp.partition)
            if cached and cached[0] == off:
                ends[tp.partition] = cached[1]
            else:
                ends[tp.partition] = true_end(self._client(), tp, off)
                self._ends[tp.partition] = (off, ends[tp.partition])
        return ends

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """What the batch from `start` to `end` reads: the state import it hands over, its Kafka
        ranges, and its context (one row per bucket). A batch planned under another layout of the
        state (no `LAYOUT` entry of this job's layout: Spark replays it before planning
        another) hands the pending import over itself, ahead of its records."""
        ranges: list[InputPartition] = []
        lost = lost_ranges(end)
        if end.get(IMPORT_OFFSET) and end[IMPORT_OFFSET] != start.get(IMPORT_OFFSET):
            ranges.append(StateImport(str(end[IMPORT_OFFSET])))
        elif self.state_import is not None and end.get(LAYOUT) != self.layout.tag and self._imported_in in (None, end):
            ranges.append(StateImport(self.state_import))
            self._imported_in = dict(end)
            log.warning("batch planned under another layout of the state, replayed now: it hands the moved state "
                        "over (%s)", self.state_import)
        since = {int(p): int(t) for p, t in (start.get(LOG_CLOCK) or {}).items()}
        until = {int(p): int(t) for p, t in (end.get(LOG_CLOCK) or {}).items()}
        for p, e in sorted(end.items()):
            if not admission.is_partition(p):
                continue
            s, e = int(start.get(p, 0)), int(e)
            if e < s:  # reset log: everything it holds now is new
                s = self._beginning(int(p))
            elif int(p) in lost:  # the retention removed the first offsets: the log begins later
                s = max(s, lost[int(p)][1])
            if e > s:
                ranges.append(KafkaRange(int(p), s, e, since.get(int(p)), until.get(int(p))))
        times = {"planned": int(time.time() * 1000)}
        if self._trigger_ms is not None:
            times["trigger"] = self._trigger_ms
        context = ContextRows(BatchContext.planned(start, end, times), self.layout)
        # The context rides with the shortest range's task rather than in a task of its own: each
        # task of the read stage costs a Python worker's round trip, and with one more task than
        # there are cores (two partitions, local[2]) the last one waited for a free core, about a
        # tenth of a second of every batch (Spark's event log, 1,000 brokers, one-record batches).
        kafka = [r for r in ranges if isinstance(r, KafkaRange)]
        if kafka:
            shortest = min(kafka, key=lambda r: r.end - r.start)
            shortest.context = context
        else:
            ranges.append(context)
        return ranges

    def _beginning(self, partition: int) -> int:
        from kafka import TopicPartition
        tp = TopicPartition(self.topic, partition)
        return int(self._client().beginning_offsets([tp])[tp])

    def commit(self, end: dict) -> None:
        """A batch committed: once one carried the outage floor, the store's mark has done its part;
        once one handed a state import over, the state is in this job's layout (`state_layout`)."""
        if self.state_import is not None and self.layout_dir is not None and (
                self._imported_in == end or end.get(IMPORT_OFFSET) == self.state_import):
            state_layout.record_layout(self.layout_dir, self.layout)
            log.info("the state is in %s now (%s)", self.layout.describe(), self.layout_dir / state_layout.LAYOUT_FILE)
            self.state_import = None
        self._outage.committed(int(end.get(RESUMED, 0)))
        # Once per batch, in the process that plans (Spark's source runner): what the looks at the
        # log fetched and decoded is given back (a 10,000-broker fleet's records; no collection:
        # the ledger's objects are long-lived and hold no cycles).
        release_memory(collect=False)

    def _after_empty_poll(self, c: Any, tp: Any, partition: KafkaRange, nxt: int, short: ShortLogs,
                          losses: list[tuple[Any, ...]]) -> int | None:
        """Nothing where records were planned: where the read goes on (None: the rest of the range
        is gone). Has the topic's retention removed them meanwhile, or has the broker lost its log
        (memory storage restarted; believed as `ShortLogs` says)? Asked only here, so a normal read
        costs no extra requests."""
        from kafka.errors import KafkaError
        try:  # the log's start first: it needs no fetch, so a removed position's error cannot hide it
            begins = int(c.beginning_offsets([tp])[tp])
        except KafkaError:  # the broker went away mid-read: wait for it (the read's deadline bounds it)
            time.sleep(0.5)
            return nxt
        if begins > nxt:
            losses.append(self._gone_by_retention(partition.partition, nxt, min(begins, partition.end)))
            return None if begins >= partition.end else begins
        try:
            end = true_end(c, tp, c.end_offsets([tp])[tp])
        except KafkaError:
            time.sleep(0.5)
            return nxt
        if end < partition.end:
            if not short.believed(partition.partition):
                c._client.cluster.request_update()  # ask who leads now
                time.sleep(1.0)
                return nxt
            log.warning("%s[%d]: offsets %d..%d are gone (log end is now %d, for %.0f s); skipped",
                        self.topic, partition.partition, nxt, partition.end, end, GONE_CONFIRM_S)
            return None
        short.clear(partition.partition)
        return nxt

    def _rows(self, records: list[Any], partition: KafkaRange, nxt: int, clock: LogClock,
              short: ShortLogs) -> Generator[tuple[Any, ...], None, int]:
        """The range's rows among a poll's `records`, from offset `nxt`; returns the next offset."""
        for rec in records:
            if rec.offset < nxt:  # a fetch starts at its batch's base offset
                continue
            short.clear(partition.partition)
            if rec.offset > nxt:  # the log begins later than planned: the retention removed them meanwhile
                yield self._gone_by_retention(partition.partition, nxt, min(rec.offset, partition.end))
                nxt = min(rec.offset, partition.end)
            if rec.offset >= partition.end:
                break
            key = rec.key.decode("utf-8", "replace") if rec.key is not None else None
            received = clock.receive_time(rec.timestamp, partition.partition)
            yield (partition.partition, rec.offset, received, key, rec.value)
            nxt = rec.offset + 1
        return nxt

    def _gone_by_retention(self, partition: int, first: int, end: int) -> tuple[Any, ...]:
        """Offsets a batch's read found removed after its plan named what it found gone (`LOST`):
        logged here, and read as a loss row (`batch_context.LOSS_PARTITION`) that the step passes
        on to the sink, which names them as it names the plan's."""
        log.warning("%s[%d]: offsets %d..%d (%d events) were removed by the topic's retention while the batch read "
                    "them; skipped and named in dead_letter", self.topic, partition, first, end - 1, end - first)
        return (LOSS_PARTITION, first, 0, self.layout.keys[0], loss_row_value(partition, first, end))

    def stop(self) -> None:
        for c in (self._consumer, self._watcher):
            if c is not None:
                c.close()
        self._consumer = self._watcher = None

    # -- executor side
    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        if isinstance(partition, StateImport):
            yield from _read_import(partition)
        elif isinstance(partition, ContextRows):
            yield from partition.rows()
        else:
            assert isinstance(partition, KafkaRange)
            if partition.context is not None:
                yield from partition.context.rows()
            began = time.monotonic()
            yield from self._read_range(partition)
            took = time.monotonic() - began
            if took > SLOW_READ_S:
                log.warning("%s[%d]: offsets %d..%d read in %.1f s", self.topic, partition.partition,
                            partition.start, partition.end, took)

    def _read_range(self, partition: KafkaRange) -> Iterator[tuple[Any, ...]]:
        from kafka import TopicPartition
        from kafka.errors import KafkaError, OffsetOutOfRangeError
        tp = TopicPartition(self.topic, partition.partition)
        clock = partition.clock()
        c = _reader_consumer(self.bootstrap)
        ok = False
        try:
            c.assign([tp])
            c.seek(tp, partition.start)
            nxt = partition.start
            short = ShortLogs()
            # The read fails when no record comes for READ_STUCK_S, not when the whole range took
            # that long: a range is read as fast as the task consumes its rows, and at 100,000
            # brokers a read of 2,500 registrations that went on coming failed at 120 s, which
            # restarted the job (by hand, 2026-11-29).
            waiting_since: float | None = None  # since when polls bring none of the planned records
            marked = False  # this read marked an outage
            while nxt < partition.end:
                if waiting_since is not None and time.monotonic() - waiting_since > READ_STUCK_S:
                    raise RuntimeError(
                        f"{self.topic}[{partition.partition}]: offsets {nxt}..{partition.end} not readable "
                        f"for {READ_STUCK_S:.0f} s (broker gone?)")
                marked = marked or self._outage.stalled(self.topic, partition.partition, waiting_since)
                lost = False  # the consumer's position is void (not in the log): it must be set again
                try:
                    records = c.poll(timeout_ms=READ_POLL_MS, max_records=5000).get(tp, [])
                except OffsetOutOfRangeError:  # not in the log: retention removed it, or the log was wiped
                    records, lost = [], True
                except KafkaError:
                    waiting_since = time.monotonic() if waiting_since is None else waiting_since
                    time.sleep(0.5)
                    continue
                if records:
                    waiting_since = None
                    nxt = yield from self._rows(records, partition, nxt, clock, short)
                    continue
                waiting_since = time.monotonic() if waiting_since is None else waiting_since
                if not lost and time.monotonic() - waiting_since < READ_CHECK_S:
                    continue  # its fetch is in flight: a seek (the checks below make one) would drop it
                losses: list[tuple[Any, ...]] = []
                after = self._after_empty_poll(c, tp, partition, nxt, short, losses)
                yield from losses
                if after is None:
                    ok = True
                    return
                nxt = after
                c.seek(tp, nxt)
            ok = True
        finally:
            if not ok:  # an error or an abandoned read: start the next one on a fresh connection
                _drop_reader_consumer(self.bootstrap)
