"""pipelines.sink.plan_batch and the offset-log reader: the pure parts of the sink."""

from __future__ import annotations

import json

from pipelines.batch_context import BatchContext
from pipelines.offset_log import LOG_CLOCK, RESETS
from pipelines.sink import batch_read, plan_batch
from pipelines.step_rows import BATCH, DEAD_LETTER, READ, REJECTED, row


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
