"""pipelines.sink.plan_batch and the offset-log reader: the pure parts of the sink."""

from __future__ import annotations

import json

from pipelines.offset_log import read_offset_log
from pipelines.sink import plan_batch
from pipelines.step_rows import DEAD_LETTER, REJECTED


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


def test_offset_log_reader(tmp_path):
    f = tmp_path / "3"
    f.write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n{"0":12,"1":4}\n')
    assert read_offset_log(f) == {"0": 12, "1": 4}
    assert read_offset_log(tmp_path / "missing") == {}
