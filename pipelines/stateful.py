"""The applyInPandasWithState step: raw Kafka records of one group → state + table rows.

Parsing happens here rather than in an earlier stage because an event is only meaningful
inside its group's ordered stream (the Kafka key), and one Python stage per batch is
cheaper than two. The rules themselves live in `routing` and `kv`; this module only
decodes, orders, dispatches and encodes.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Iterator

import pandas as pd

from pipelines import kv, routing
from pipelines.memory import ReleaseAfter
from schemas import events as ev
from schemas import tables as t

# grp: for table rows, the value of the table's owner column (brokerName, namespace, scope).
OUTPUT_SCHEMA = ("grp string, tbl string, payload string, raw binary, rawKey string, "
                 "partition int, offset long, kafkaTimestamp long")
# Routing groups keep (core JSON, topic table JSON) so that a heartbeat decodes only the core;
# KV and config groups use only the first column.
STATE_SCHEMA = "core string, topics string"
State = tuple[str, "str | None"]
OUTPUT_COLUMNS = ["grp", "tbl", "payload", "raw", "rawKey", "partition", "offset", "kafkaTimestamp"]

DEAD_LETTER = t.DEAD_LETTER.name
REJECTED = "_rejected"  # a valid event that RocketMQ's rules refused (logged, no table change)
DEADLINE = "_deadline"  # the group's next timeout (epoch ms, "" = none): the source schedules batches by it

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepConfig:
    routing: routing.RoutingConfig
    max_message_bytes: int
    max_clock_skew_ms: int


def run_group(group: str | None, records: list[dict[str, Any]], state: State | None, now_ms: int,
              cfg: StepConfig) -> tuple[State | None, int | None, list[dict[str, Any]]]:
    """Pure core of the step: returns (new state, next expiry deadline, output rows)."""
    out: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    coords: list[tuple[int, int]] = []
    for r in sorted(records, key=lambda r: (r["partition"], r["offset"])):
        try:
            events.append(ev.parse_event(r["value"], key=r["key"], record_time_ms=r["timestamp"],
                                         max_message_bytes=cfg.max_message_bytes,
                                         max_clock_skew_ms=cfg.max_clock_skew_ms))
            coords.append((r["partition"], r["offset"]))
        except ev.InvalidEvent as exc:
            out.append({"grp": group, "tbl": DEAD_LETTER, "payload": str(exc), "raw": r["value"], "rawKey": r["key"],
                        "partition": r["partition"], "offset": r["offset"], "kafkaTimestamp": r["timestamp"]})

    if group is not None and (group.startswith(ev.KV_KEY_PREFIX) or group == ev.CONFIG_KEY):
        is_config = group == ev.CONFIG_KEY
        ns = kv.Namespace.from_json(state[0]) if state else None
        ns, changes = kv.apply(ns, events)
        if changes:
            if is_config:
                out.append(_table_row(kv.CONFIG_SCOPE, t.NAMESRV_CONFIG.name, kv.config_rows(ns)))
            else:
                out.append(_table_row(group[len(ev.KV_KEY_PREFIX):], t.KV_CONFIG.name, kv.table_rows(ns)))
            out.append(_changes_row(group, None, changes, coords))
        return ((ns.to_json(), None) if ns else None), None, out

    st = routing.GroupState.from_parts(*state) if state else None
    if st is None and not events:
        return None, None, out
    st, res = routing.apply(st, events, now_ms, cfg.routing)
    for reason in res.rejected:
        out.append(_row(group, REJECTED, reason))
    for table in sorted(res.dirty):
        out.append(_table_row(group, table, routing.table_rows(st, table)))
    if res.changes:
        out.append(_changes_row(group, group, res.changes, coords))
    deadline = routing.next_deadline(st, cfg.routing)
    out.append(_row(group, DEADLINE, "" if deadline is None else str(deadline)))
    return (st.to_parts() if st else None), deadline, out


def _changes_row(group: str | None, broker_name: str | None, changes: list[dict[str, Any]],
                 coords: list[tuple[int, int]]) -> dict[str, Any]:
    """route_changes rows (without snapshotId/seq, which the sink assigns) for one group's call."""
    rows = []
    for c in changes:
        i = c.get("eventIndex")
        partition, offset = coords[i] if i is not None else (None, None)
        rows.append({"time": c["time"], "kind": c["kind"], "clusterName": c.get("clusterName"),
                     "brokerName": broker_name, "brokerAddr": c.get("brokerAddr"), "brokerId": c.get("brokerId"),
                     "topic": c.get("topic"), "namespace": c.get("namespace"), "key": c.get("key"),
                     "before": None if c["before"] is None else json.dumps(c["before"], sort_keys=True),
                     "after": None if c["after"] is None else json.dumps(c["after"], sort_keys=True),
                     "partition": partition, "offset": offset})
    return _row(group, t.ROUTE_CHANGES.name, json.dumps(rows, separators=(",", ":")))


def _table_row(owner: str | None, table: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """`rows` replace every row of `table` whose owner column equals `owner`."""
    return _row(owner, table, json.dumps(rows, separators=(",", ":")))


def _row(grp: str | None, tbl: str, payload: str) -> dict[str, Any]:
    """An output row that is not a quarantined record (no raw bytes, no Kafka coordinates)."""
    return {"grp": grp, "tbl": tbl, "payload": payload, "raw": None, "rawKey": None, "partition": None,
            "offset": None, "kafkaTimestamp": None}


def make_step(cfg: StepConfig):
    """The function handed to applyInPandasWithState (ProcessingTimeTimeout)."""
    released = ReleaseAfter(64 * 1024 * 1024)  # per Python worker process (the function is unpickled there)

    def step(key: tuple, pdfs: Iterator[pd.DataFrame], state) -> Iterator[pd.DataFrame]:
        # Called once per group per batch: plain lists in and out, not pandas row operations
        # (to_dict / astype cost more than the routing rules themselves).
        group = key[0]
        records: list[dict[str, Any]] = []
        for pdf in pdfs:
            for k, v, p, o, ts in zip(pdf["key"].tolist(), pdf["value"].tolist(), pdf["partition"].tolist(),
                                      pdf["offset"].tolist(), pdf["timestamp"].tolist()):
                records.append({"key": k if isinstance(k, str) else None, "value": v, "partition": int(p),
                                "offset": int(o), "timestamp": int(ts)})
        now = state.getCurrentProcessingTimeMs()
        previous = tuple(state.get) if state.exists else None
        new_state, deadline, rows = run_group(group, records, previous, now, cfg)
        if new_state is None:
            if state.exists:
                state.remove()
        elif new_state != previous or state.hasTimedOut:
            state.update(new_state)
        if new_state is not None and deadline is not None:
            state.setTimeoutDuration(max(1, deadline - now))
        released.add(sum(len(r["value"] or b"") for r in records) + sum(len(r["payload"] or "") for r in rows))
        if rows:
            yield pd.DataFrame({
                **{c: [r[c] for r in rows] for c in ("grp", "tbl", "payload", "raw", "rawKey")},
                "partition": pd.array([r["partition"] for r in rows], dtype="Int32"),
                "offset": pd.array([r["offset"] for r in rows], dtype="Int64"),
                "kafkaTimestamp": pd.array([r["kafkaTimestamp"] for r in rows], dtype="Int64")})

    return step
