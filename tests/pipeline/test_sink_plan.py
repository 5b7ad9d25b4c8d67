"""pipelines.sink.plan_batch and the offset-log reader: the pure parts of the sink."""

from __future__ import annotations

import json

from pipelines.batch_context import BatchContext
from pipelines.offset_log import LOG_CLOCK, RESETS
from pipelines.sink import batch_read, plan_batch, route_changes_table
from pipelines.step_rows import BATCH, CHANGE_FIELDS, DEAD_LETTER, READ, REJECTED, ROUTE_CHANGES, row
from schemas import tables as t


def out(owner, target, body, **coords):
    return {"owner": owner, "target": target, "body": body, "raw": coords.get("raw"), "rawKey": coords.get("key"),
            "partition": coords.get("partition"), "offset": coords.get("offset"), "kafkaTimestamp": None}


def test_plan_groups_rows_by_table_and_owner():
    rows = [out("a", "topic_queue", json.dumps([{"topic": "T"}])), out("b", "topic_queue", "[]"),
            out("ns", "kv_config", json.dumps([{"namespace": "ns", "key": "k", "value": "v"}])),
            out(None, DEAD_LETTER, "bad", raw=b"x", partition=1, offset=9),
            out(None, DEAD_LETTER, "bad2", raw=b"y", partition=0, offset=3),
            out("a", REJECTED, "stale")]
    plan = plan_batch(rows, 7, 123)
    assert plan.replace["topic_queue"] == {"a": [{"topic": "T"}], "b": []}
    assert plan.replace["kv_config"] == {"ns": [{"namespace": "ns", "key": "k", "value": "v"}]}
    assert [(d["partition"], d["offset"], d["batchId"]) for d in plan.dead_letters] == [(0, 3, 7), (1, 9, 7)]
    assert plan.rejected == ["a: stale"]


def change(**values):
    return [values.get(name) for name in CHANGE_FIELDS]


def test_route_changes_are_ordered_by_log_position_and_numbered_in_the_table():
    """Changes come as lists (step_rows.CHANGE_FIELDS) from each group's call; the table orders them
    by Kafka position, expiries (no position) last, and numbers them in that order."""
    expiry = change(time=50, kind="BROKER_EXPIRED", brokerName="b", brokerAddr="10.0.0.2:10911")
    late = change(time=20, kind="TOPIC_ADDED", brokerName="a", topic="T", after='{"perm": 6}', partition=1, offset=4)
    early = change(time=30, kind="BROKER_ADDED", clusterName="c", brokerName="b", brokerId=0, partition=0, offset=9)
    kv = change(time=10, kind="KV_PUT", namespace="ns", key="k", after='"v"', partition=1, offset=2)
    rows = [row("b", ROUTE_CHANGES, json.dumps([expiry, early])), row("a", ROUTE_CHANGES, json.dumps([late])),
            row("kv/ns", ROUTE_CHANGES, json.dumps([kv]))]
    plan = plan_batch(rows, 7, 123)
    table = route_changes_table(plan.changes, 7)
    assert table.schema == t.ROUTE_CHANGES.schema
    assert table.to_pylist() == [{"snapshotId": 7, "seq": seq, **dict(zip(CHANGE_FIELDS, c, strict=True))}
                                 for seq, c in enumerate([early, kv, late, expiry])]
    assert route_changes_table([], 7).num_rows == 0


def test_the_batch_tells_the_sink_what_it_read():
    """Our source's batch reports itself (bucket 0's context row); the report rows are no table."""
    context = BatchContext.planned({"0": 3, "1": 4, "tick": 2},
                                   {"0": 12, "1": 4, "tick": 2, LOG_CLOCK: {"0": 900, "1": 950}, RESETS: {"1": 1}},
                                   {"trigger": 800, "planned": 960})
    rows = [row(None, BATCH, context.to_json(report=True).decode()), row("a", "topic_queue", "[]")]
    read = batch_read(rows, {"0": 1})
    assert (read.offsets, read.count, read.resets, read.lost) == ({"0": 12, "1": 4}, 9, {"1": 1}, [])
    assert read.times == {"trigger": 800, "planned": 960, "admitted": 950}
    assert set(plan_batch(rows, 1, 0).replace) == {"topic_queue"}


def test_with_spark_s_kafka_connector_the_calls_tell_how_far_their_records_reach():
    rows = [row(None, READ, json.dumps({"0": [13, 4]})), row(None, READ, json.dumps({"0": [11, 2], "1": [5, 5]}))]
    read = batch_read(rows, {"0": 9, "2": 7})
    assert (read.offsets, read.count) == ({"0": 13, "1": 5, "2": 7}, 11)
