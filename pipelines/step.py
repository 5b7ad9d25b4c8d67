"""The applyInPandasWithState step: raw Kafka records of one group → state + output rows.

Parsing happens here rather than in an earlier stage because an event is only meaningful
inside its group's ordered stream (the Kafka key), and one Python stage per batch is
cheaper than two. The rules themselves live in `routeinfo`; this module only decodes,
orders, dispatches and encodes (`step_rows` defines what it emits).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from conf import Config
from conf.memory import ReleaseAfter
from eventlog.fetch import RecordFetcher
from liveness import hot
from pipelines import buckets as bk
from pipelines import step_rows as out_rows
from pipelines.batch_context import CONTEXT_PARTITION, LOSS_PARTITION, BatchContext
from pipelines.offset_log import LogClock
from routeinfo import housekeeping, kv_manager, route_manager
from routeinfo.route_writes import NeedsBody, RoutingConfig
from routeinfo.state import GroupState, table_rows, topic_keys_digest
from schemas import events as ev
from schemas import json_codec
from schemas import tables as t
from schemas.fields import InvalidInput

UNBOUNDED = LogClock()  # no log clock (Spark's Kafka connector): receive times bounded by processing time only

# Routing groups keep (core JSON, topic table JSON) so that a heartbeat decodes only the core;
# KV and config groups use only the first column.
STATE_SCHEMA = "core string, topics string"
State = tuple[str, "str | None"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepConfig:
    routing: RoutingConfig
    max_message_bytes: int
    max_clock_skew_ms: int
    # The keys of the stateful operator broker groups share (pipelines/buckets.py): the job's
    # start decides it with the checkpoint (`state_layout.prepare`).
    layout: bk.Layout = field(default_factory=lambda: bk.Layout(32))
    # Where the events topic is, for the body of a repeated registration the rules need
    # (eventlog/fetch.py; None: unit tests, which pass their own `fetch`).
    bootstrap: str | None = None
    topic: str = ""

    @staticmethod
    def from_config(cfg: Config) -> StepConfig:
        return StepConfig(
            routing=RoutingConfig(default_timeout_ms=cfg.broker_timeout_ms, live_flush_ms=cfg.live_flush_ms,
                                  delete_topic_with_broker_registration=cfg.delete_topic_with_broker_registration),
            max_message_bytes=cfg.max_message_bytes, max_clock_skew_ms=cfg.max_clock_skew_ms,
            layout=bk.Layout(cfg.state_buckets, cfg.shuffle_partitions), bootstrap=cfg.bootstrap,
            topic=cfg.kafka_topic)


# (partition, offsets) -> the record values there, None where the log holds none (eventlog/fetch.py)
Fetch = Callable[[int, list[int]], list["bytes | None"]]


def run_group(group: str | None, records: list[dict[str, Any]], state: State | None, now_ms: int,
              cfg: StepConfig, clock: LogClock = UNBOUNDED, fetch: Fetch | None = None,
              parsed: list[dict[str, Any]] | None = None) -> tuple[State | None, int | None, list[dict[str, Any]]]:
    """Pure core of the step: returns (new state, next expiry deadline, output rows). Event
    times are the records' receive times bounded by the batch's log `clock`; expiry runs at the
    clock's time, not ahead of what the job has read.

    A repeated registration whose topic table the rules need (route_writes.NeedsBody) is
    replaced by the registration it repeats, read with `fetch`, and the group runs again from
    the same state; one whose body the log no longer holds, or holds changed, is dead-lettered
    with the reason and the group runs without it. `parsed`, if given, receives the events the
    rules applied (with their `logOffset`)."""
    refused: list[dict[str, Any]] = []
    while True:
        try:
            new, deadline, rows = _run_records(group, records, state, now_ms, cfg, clock, parsed)
            return new, deadline, refused + rows
        except NeedsBody as need:
            records, dead = _with_body(group, records, need, fetch)
            refused.extend(dead)


@functools.cache
def _rules_source() -> bytes:
    """The write rules' own source: a verdict of `GroupRunner.repeats_nothing` holds for these rules
    only. Read through each module's loader: an executor imports them from the job's code archive."""
    import importlib
    out = []
    for name in ("route_manager", "route_writes", "housekeeping", "state"):
        module = importlib.import_module(f"routeinfo.{name}")
        source = module.__loader__.get_source(module.__name__)  # type: ignore[union-attr]
        if source is None:
            raise RuntimeError(f"no source for {module.__name__}: the rules' version cannot be told")
        out.append(source.encode("utf-8"))
    return b"".join(out)


@functools.cache
def verdicts_key(routing: RoutingConfig) -> str:
    """What a bucket's fixed-point verdicts (`liveness/hot.py`) were made under: the routing settings
    (a default timeout, say, is what a repeat without its own writes) and the rules' source. A job
    under another key makes them again."""
    h = hashlib.blake2b(_rules_source(), digest_size=8)
    h.update(json.dumps(dataclasses.asdict(routing), sort_keys=True).encode())
    return h.hexdigest()


class GroupRunner:
    """The route rules of one batch as a bucket's call asks for them (`pipelines.buckets.GroupRules`):
    a group's whole run, its records read as liveness signals, and whether a registration is a
    fixed point of its group's rules (`liveness/hot.py`)."""

    def __init__(self, now_ms: int, cfg: StepConfig, clock: LogClock = UNBOUNDED, fetch: Fetch | None = None) -> None:
        self.now_ms, self.cfg, self.clock, self.fetch = now_ms, cfg, clock, fetch
        self.flush_ms = cfg.routing.live_flush_ms
        self.heard_since = clock.resumed
        self.verdicts = verdicts_key(cfg.routing)
        self._applied: dict[str, list[dict[str, Any]]] = {}  # per group run, the events its rules applied

    def run(self, group: str, records: list[dict[str, Any]], state: State | None
            ) -> tuple[State | None, int | None, list[dict[str, Any]]]:
        applied = self._applied[group] = []
        return run_group(group, records, state, self.now_ms, self.cfg, self.clock, self.fetch, applied)

    def signals(self, records: list[dict[str, Any]]) -> list[hot.Signal] | None:
        try:
            events = [_parse(r, self.now_ms, self.cfg, self.clock)
                      for r in sorted(records, key=lambda r: (r["partition"], r["offset"]))]
        except InvalidInput:
            return None  # the rules dead-letter it
        out = []
        for e in events:
            if e["type"] == ev.BROKER_HEARTBEAT:
                out.append(hot.Signal(e["clusterName"], e["brokerAddr"], e["time"]))
            elif e["type"] == ev.REGISTER_BROKER and e["repeats"] is not None:
                out.append(hot.Signal(e["clusterName"], e["brokerAddr"], e["time"], max(e["repeats"]["offsets"]),
                                      hot.header_digest(e, e["repeats"]["topicKeys"])))
            else:
                return None
        return out

    def expiry_ms(self, records: list[dict[str, Any]]) -> int:
        return self.clock.expiry_time(self.now_ms, {r["partition"] for r in records})

    def registrations(self, group: str) -> dict[tuple[str, str], tuple[int, str, dict[str, Any]]]:
        out: dict[tuple[str, str], tuple[int, str, dict[str, Any]]] = {}
        for e in self._applied.get(group, ()):
            if e["type"] != ev.REGISTER_BROKER:
                continue
            if e["repeats"] is not None:
                offset, repeat = max(e["repeats"]["offsets"]), e
            else:
                offset = e["logOffset"]
                keys = topic_keys_digest(e["topicConfigTable"]) if e["chunk"] is None else ""
                repeat = {**e, "topicConfigTable": None, "chunk": None, "repeats": {"offsets": [offset], "topicKeys": keys}}
            out[(e["clusterName"], e["brokerAddr"])] = (offset, hot.header_digest(e, repeat["repeats"]["topicKeys"]),
                                                        repeat)
        return out

    def repeats_nothing(self, state: State, repeat: dict[str, Any]) -> bool:
        """The repeat applied at time 0 (it moves no time and nothing falls due): no row, change
        or refusal, and the group holds what it held but for times."""
        st = GroupState.from_parts(state[0], state[1] or "{}")
        before = st.signature()
        try:
            after, res = route_manager.apply(st, [{**repeat, "time": 0, "logOffset": -1}], 0, self.cfg.routing,
                                             expiry_ms=0)
        except NeedsBody:
            return False
        return after is not None and not res.rejected and not res.changes and after.signature() == before


def _with_body(group: str | None, records: list[dict[str, Any]], need: NeedsBody,
               fetch: Fetch | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`records` with the repeat at `need.log_offset` replaced by the whole registration (its
    header, with the repeat's own timestamp, and the repeated body's topic table), or without it
    and its dead-letter row when the body cannot be had."""
    i = next((i for i, r in enumerate(records) if r["offset"] == need.log_offset and r["value"]
              and b'"repeats"' in r["value"]), None)
    if i is None:  # cannot happen: the rules raised it for one of these records
        raise RuntimeError(f"no record at offset {need.log_offset} to take a body for")
    small = records[i]
    raw = json.loads(small["value"])
    values: list[bytes | None] = fetch(small["partition"], need.offsets) if fetch is not None \
        else [None] * len(need.offsets)
    table, why = _repeated_table(raw, values, need)
    rest = records[:i] + records[i + 1:]
    if table is None:
        reason = (f"{ev.REGISTER_BROKER} repeating the registration at offsets {need.offsets[:3]}"
                  f"{'…' if len(need.offsets) > 3 else ''} of partition {small['partition']}: {why}; not applied "
                  "(the broker's next full registration is)")
        return rest, [out_rows.dead_letter_row(group, reason, small)]
    whole = {k: v for k, v in raw.items() if k != "repeats"}
    whole["topicConfigTable"] = table
    value = json.dumps(whole, separators=(",", ":")).encode("utf-8")
    # it still counts as the registration it names (`route_writes._registration_offset`): the
    # front's later repeats, and its unregistration when the connection closes, name that one
    return records[:i] + [{**small, "value": value, "registration": max(need.offsets)}] + records[i + 1:], []


_SAME = ("type", "clusterName", "brokerName", "brokerAddr", "brokerId", "dataVersion")


def _repeated_table(raw: dict[str, Any], values: list[bytes | None],
                    need: NeedsBody) -> tuple[dict[str, Any] | None, str]:
    """The topic table of the registration a repeat names, checked to be the one it repeats
    (same identity and data version, the chunks complete and in order, the same topic names),
    or None and why not."""
    table: dict[str, Any] = {}
    for n, value in enumerate(values):
        if value is None:
            return None, "its body is no longer in the event log (retention, or a reset log)"
        try:
            full = json.loads(value)
        except ValueError:
            return None, "the record there is not JSON"
        if not isinstance(full, dict) or any(full.get(k) != raw.get(k) for k in _SAME) or full.get("repeats"):
            return None, "the record there is not the registration it repeats (a reset log)"
        chunk = full.get("chunk")
        if (chunk is None) != (len(values) == 1) or (chunk is not None and chunk != {"index": n, "count": len(values)}):
            return None, "the records there are not the registration's chunks in order"
        part = full.get("topicConfigTable")
        if not isinstance(part, dict):
            return None, "the record there has no topic table"
        table.update(part)
    if topic_keys_digest(table) != need.topic_keys:
        return None, "the registration there has other topics than the one repeated"
    return table, ""


def _parse(record: dict[str, Any], now_ms: int, cfg: StepConfig, clock: LogClock) -> dict[str, Any]:
    """One record's normalised event at its receive time (raises InvalidInput)."""
    event = ev.parse_event(record["value"], key=record["key"], record_time_ms=record["timestamp"],
                           max_message_bytes=cfg.max_message_bytes, max_clock_skew_ms=cfg.max_clock_skew_ms)
    event["time"] = clock.receive_time(event["time"], record["partition"], now_ms)
    return event


def _run_records(group: str | None, records: list[dict[str, Any]], state: State | None, now_ms: int,
                 cfg: StepConfig, clock: LogClock, parsed: list[dict[str, Any]] | None = None
                 ) -> tuple[State | None, int | None, list[dict[str, Any]]]:
    out: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = [] if parsed is None else parsed
    events.clear()
    coords: list[tuple[int, int]] = []
    for r in sorted(records, key=lambda r: (r["partition"], r["offset"])):
        try:
            event = _parse(r, now_ms, cfg, clock)
        except InvalidInput as exc:
            out.append(out_rows.dead_letter_row(group, str(exc), r))
            continue
        # a group's records share one partition (key = group); a repeat read whole names its registration's
        event["logOffset"] = r.get("registration", r["offset"])
        events.append(event)
        coords.append((r["partition"], r["offset"]))
    if group is not None and not ev.is_broker_group(group):
        return _run_kv_group(group, events, coords, state, out)
    expiry = clock.expiry_time(now_ms, {p for p, _ in coords})
    return _run_broker_group(group, events, coords, state, now_ms, expiry, cfg, out, clock.resumed)


def _run_kv_group(group: str, events: list[dict[str, Any]], coords: list[tuple[int, int]], state: State | None,
                  out: list[dict[str, Any]]) -> tuple[State | None, None, list[dict[str, Any]]]:
    """A KV namespace (key `kv/<namespace>`) or the runtime switches (key `config/namesrv`)."""
    ns = kv_manager.Namespace.from_json(state[0]) if state else None
    ns, changes = kv_manager.apply(ns, events)
    if changes:
        if group == ev.CONFIG_KEY:
            out.append(out_rows.table_row(kv_manager.CONFIG_SCOPE, t.NAMESRV_CONFIG.name, kv_manager.config_rows(ns)))
        else:
            out.append(out_rows.table_row(group[len(ev.KV_KEY_PREFIX):], t.KV_CONFIG.name,
                                          kv_manager.table_rows(ns)))
        out.append(_changes_row(group, None, changes, coords))
    return ((ns.to_json(), None) if ns else None), None, out


def _run_broker_group(group: str | None, events: list[dict[str, Any]], coords: list[tuple[int, int]],
                      state: State | None, now_ms: int, expiry_ms: int, cfg: StepConfig,
                      out: list[dict[str, Any]],
                      heard_since: int | None = None) -> tuple[State | None, int | None, list[dict[str, Any]]]:
    """A broker group (key = brokerName): RouteInfoManager's rules, then the next deadline."""
    st = GroupState.from_parts(state[0], state[1] or "{}") if state else None
    if st is None and not events:
        return None, None, out
    st, res = route_manager.apply(st, events, now_ms, cfg.routing, expiry_ms=expiry_ms, heard_since=heard_since)
    for reason in res.rejected:
        out.append(out_rows.row(group, out_rows.REJECTED, reason))
    for table in sorted(res.dirty_tables):
        out.append(out_rows.table_row(group, table, table_rows(st, table)))
    if res.changes:
        out.append(_changes_row(group, group, res.changes, coords))
    deadline = housekeeping.look_again(housekeeping.next_deadline(st, cfg.routing, heard_since), expiry_ms, now_ms)
    out.append(out_rows.row(group, out_rows.DEADLINE, "" if deadline is None else str(deadline)))
    return (st.to_parts() if st else None), deadline, out


# The order `_changes_row` writes a change's fields in (a literal list is the cheapest to build),
# which must be route_changes' as the sink reads it
_CHANGE_ORDER = ("time", "kind", "clusterName", "brokerName", "brokerAddr", "brokerId", "topic", "namespace", "key",
                 "before", "after", "partition", "offset")
if _CHANGE_ORDER != out_rows.CHANGE_FIELDS:
    raise RuntimeError(f"_changes_row writes {_CHANGE_ORDER}, route_changes has {out_rows.CHANGE_FIELDS}")


def _changes_row(group: str | None, broker_name: str | None, changes: list[dict[str, Any]],
                 coords: list[tuple[int, int]]) -> dict[str, Any]:
    """route_changes rows (`step_rows.CHANGE_FIELDS`: without snapshotId/seq, which the sink
    assigns) for one group's call."""
    rows = []
    dumps = out_rows.dumps_sorted
    for c in changes:
        i = c.get("eventIndex")
        partition, offset = coords[i] if i is not None else (None, None)
        before, after = c["before"], c["after"]
        rows.append([c["time"], c["kind"], c.get("clusterName"), broker_name, c.get("brokerAddr"), c.get("brokerId"),
                     c.get("topic"), c.get("namespace"), c.get("key"),
                     None if before is None else dumps(before), None if after is None else dumps(after),
                     partition, offset])
    # the list only travels to the sink; the before/after texts inside are what route_changes stores
    return out_rows.row(group, out_rows.ROUTE_CHANGES, json_codec.dumps_text(rows))


def step_input(events: Any, layout: bk.Layout) -> Any:
    """The stateful stage's input: (key, record). `key` is the operator's key (a broker group's
    bucket, `pipelines/buckets.py`); `record` is the Kafka coordinates, a value-present flag and
    the record key's length as `partition,offset,timestamp,0|1,keylen` (-1: no key) and a newline,
    then the record key, then the value. PySpark turns every column of every group into a pandas
    Series and concatenates them: two columns instead of six halve that, the largest part of
    what a call costs."""
    from pyspark.sql.functions import coalesce, col, concat, concat_ws, encode, lit, octet_length, when
    key = col("key")
    head = concat(concat_ws(",", col("partition"), col("offset"), col("timestamp"),
                            when(col("value").isNull(), lit("0")).otherwise(lit("1")),
                            when(key.isNull(), lit(-1)).otherwise(octet_length(key))), lit("\n"))
    value = col("value").cast("binary")
    # a bucket's imported state, the batch's context and a read's loss: already addressed to their bucket
    addressed = col("partition") < lit(0)
    return events.select(when(addressed, key).otherwise(layout.key_column(key)).alias("key"),
                         concat(encode(head, "UTF-8"), encode(coalesce(key, lit("")), "UTF-8"),
                                coalesce(value, lit(bytearray()))).alias("record"))


def _unpack(record: bytes) -> dict[str, Any]:
    """One record of `step_input`'s layout as the dict `run_group` takes."""
    head, _, rest = record.partition(b"\n")
    partition, offset, timestamp, present, key_length = head.split(b",")
    n = int(key_length)
    key, value = (None, rest) if n < 0 else (rest[:n].decode("utf-8"), rest[n:])
    return {"key": key, "value": value if present == b"1" else None,
            "partition": int(partition), "offset": int(offset), "timestamp": int(timestamp)}


def batch_records(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], LogClock, list[dict[str, Any]]]:
    """A call's records without the batch's own rows, the batch's log clock (from its context
    row: every bucket gets one; none: UNBOUNDED), and what this call reports to the sink: the
    batch (bucket 0's context row asks), the losses its reads found (addressed to bucket 0), or,
    with Spark's Kafka connector (no context), how far this call's records reach per partition."""
    context: BatchContext | None = None
    reports: list[dict[str, Any]] = []
    kept = []
    for r in records:
        if r["partition"] == CONTEXT_PARTITION:
            context, report = BatchContext.from_json(r["value"])
            if report:
                reports.append(out_rows.row(None, out_rows.BATCH, r["value"].decode()))
        elif r["partition"] == LOSS_PARTITION:
            reports.append(out_rows.row(None, out_rows.READ_LOSS, r["value"].decode()))
        else:
            kept.append(r)
    if context is None and kept:
        reach: dict[str, list[int]] = {}
        for r in kept:
            if r["partition"] >= 0:
                at = reach.setdefault(str(r["partition"]), [0, 0])
                at[0], at[1] = max(at[0], r["offset"] + 1), at[1] + 1
        if reach:
            reports.append(out_rows.row(None, out_rows.READ, json.dumps(reach)))
    return kept, (UNBOUNDED if context is None else context.clock()), reports


def make_step(cfg: StepConfig) -> Callable[..., Iterator[pd.DataFrame]]:
    """The function handed to applyInPandasWithState (ProcessingTimeTimeout), keyed as `step_input` keys."""
    released = ReleaseAfter(64 * 1024 * 1024)  # per Python worker process (the function is unpickled there)
    fetch = RecordFetcher(cfg.bootstrap, cfg.topic) if cfg.bootstrap else None  # connects on first use

    buckets = cfg.layout.prefix

    def step(key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        # Called once per key per batch: plain lists in and out, not pandas row operations
        # (to_dict / astype cost more than the routing rules themselves).
        slot = key[0]
        records, clock, reports = batch_records([_unpack(r) for pdf in pdfs for r in pdf["record"].tolist()])
        now = state.getCurrentProcessingTimeMs()
        if fetch is not None:
            fetch.begin(now)  # every key of one batch shares its processing time
        previous = tuple(state.get) if state.exists else None
        new_state: State | None
        if isinstance(slot, str) and slot.startswith(buckets):
            new_state, deadline, rows = bk.run_bucket(records, previous, now, GroupRunner(now, cfg, clock, fetch))
        elif ev.is_broker_group(slot):
            # A key of the layout the checkpoint was moved from (pipelines/state_layout.py): its
            # groups live in buckets now; Spark calls it once more, at its old timeout.
            new_state, deadline, rows = None, None, []
        else:
            new_state, deadline, rows = run_group(slot, records, previous, now, cfg, clock, fetch)
        rows = reports + rows
        if new_state is None:
            if state.exists:
                state.remove()
        elif new_state != previous or state.hasTimedOut:
            state.update(new_state)
        if new_state is not None and deadline is not None:
            state.setTimeoutDuration(max(1, deadline - now))
        released.add(sum(len(r["value"] or b"") for r in records) + sum(len(r["body"] or "") for r in rows))
        if rows:
            # Object columns (Python ints and None, no inference): a third of the cost of nullable
            # Int32/Int64 arrays to build, a fifth to concatenate, and Arrow converts them to the
            # schema's types alike; most calls emit one row (the deadline).
            yield pd.DataFrame({c: [r[c] for r in rows] for c in out_rows.COLUMNS}, dtype=object)

    return step

