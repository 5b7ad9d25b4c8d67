"""Issue 34, the pure parts: the events topic's retention as it is created, what the embedded
broker runs, and how a batch names what the retention removed before the job read it (the
running whole is tests/recovery/test_retention.py)."""

from __future__ import annotations

import json

import pytest

from conf import ConfigError, load_config
from eventlog.journal import AdminJournal
from eventlog.topics import MAX_SEGMENT_MS, retention_configs
from pipelines.batch_context import LOSS_PARTITION, BatchContext, loss_row_value
from pipelines.offset_log import LOST, lost_ranges, partition_offsets
from pipelines.sink import batch_read, lost_rows
from pipelines.step import batch_records
from schemas import events as ev
from schemas.metrics import reason_class


def test_the_topic_is_created_with_the_configured_retention():
    cfg = load_config({"NAMESRV_KAFKA_RETENTION_MS": "5000", "NAMESRV_KAFKA_RETENTION_BYTES": "1048576",
                       "NAMESRV_KAFKA_SEGMENT_BYTES": "65536"})
    assert retention_configs(cfg) == {"cleanup.policy": "delete", "retention.ms": "5000", "retention.bytes": "1048576",
                                      "segment.bytes": "65536", "segment.ms": "5000"}
    default = retention_configs(load_config({}))
    assert default["retention.ms"] == "86400000" and default["segment.ms"] == str(MAX_SEGMENT_MS)
    assert int(default["retention.bytes"]) == 2**30 and int(default["segment.bytes"]) == 64 * 2**20
    with pytest.raises(ConfigError, match="NAMESRV_KAFKA_EMBEDDED"):
        load_config({"NAMESRV_KAFKA_EMBEDDED": "redpanda"})
    with pytest.raises(ConfigError, match="NAMESRV_KAFKA_RETENTION_MS must be positive"):
        load_config({"NAMESRV_KAFKA_RETENTION_MS": "0"})


def test_the_embedded_broker_is_apache_kafka_unless_tansu_is_asked_for(tmp_path):
    from ops.embedded_kafka import kafka_properties
    from ops.launcher import embedded_broker
    kafka = embedded_broker(load_config({"NAMESRV_DATA_DIR": str(tmp_path)}))
    assert "kafka.Kafka" in kafka.argv and str(tmp_path / "kafka" / "server.properties") in kafka.argv
    assert kafka.prepare is not None and "retention 24 h or 1 GiB a partition" in kafka.banner
    props = kafka_properties(19092, 19093, tmp_path / "data", retention_check_ms=500)
    assert "auto.create.topics.enable=false" in props and "log.retention.check.interval.ms=500" in props
    tansu = embedded_broker(load_config({"NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_KAFKA_EMBEDDED": "tansu"}))
    assert "memory://tansu/" in tansu.argv and tansu.prepare is None and "no retention" in tansu.banner


def test_a_batchs_lost_ranges_travel_in_its_offsets_and_are_not_offsets():
    raw = {"0": 12, "1": 40, "tick": 3, "clock": {"0": 1, "1": 2}, "resets": {"0": 1}, LOST: {"1": [7, 31]}}
    assert partition_offsets(raw) == {"0": 12, "1": 40}
    assert lost_ranges(raw) == {1: (7, 31)}
    assert lost_ranges({"0": 12}) == {}


def test_the_journal_notes_admin_writes_only_and_forgets_what_the_job_read(tmp_path):
    journal = AdminJournal(tmp_path)
    events = [ev.put_kv_event("ns", "k", "v"), ev.heartbeat_event(cluster="C", broker_name="b", broker_id=0,
                                                                  addr="127.0.0.1:1"),
              ev.delete_topic_event("T", "b"), ev.wipe_write_perm_event("b")]
    journal.record(events, [(0, 5), (1, 9), (1, 10), (1, 11)])
    assert [(e.partition, e.offset, e.type) for e in journal.between(1, 0, 100)] == [
        (1, 10, ev.DELETE_TOPIC_IN_NAMESRV), (1, 11, ev.WIPE_WRITE_PERM_OF_BROKER)]
    (kv,) = journal.between(0, 5, 6)
    assert kv.key == "kv/ns" and json.loads(kv.value) == events[0]
    assert kv.describe() == "PUT_KV_CONFIG namespace=ns key=k (partition 0, offset 5)"
    assert journal.between(0, 6, 100) == [] and journal.between(7, 0, 100) == []
    assert journal.prune({"0": 6, "1": 11}) == 2  # partition 1 offset 11 is not read yet
    assert [e.offset for e in journal.between(1, 0, 100)] == [11] and journal.between(0, 0, 100) == []
    (tmp_path / "_admin_writes" / "1" / "12.json").write_text("{half")  # a note cut short: skipped, said
    assert [e.offset for e in journal.between(1, 0, 100)] == [11]


def test_lost_ranges_become_dead_letters_naming_the_admin_writes_among_them(tmp_path):
    journal = AdminJournal(tmp_path)
    journal.record([ev.put_kv_event("ns", "gone", "v1"), ev.put_kv_event("ns", "later", "v2")], [(0, 3), (0, 20)])
    rows, lines = lost_rows([(0, 2, 10), (1, 0, 4)], journal, batch_id=7, now_ms=1000)
    ranges = [r for r in rows if r["value"] is None]
    writes = [r for r in rows if r["value"] is not None]
    assert [(r["partition"], r["offset"]) for r in ranges] == [(0, 2), (1, 0)]
    assert "offsets 2..9 of partition 0 (8 events)" in ranges[0]["reason"]
    assert [(w["partition"], w["offset"], w["key"]) for w in writes] == [(0, 3, "kv/ns")]
    assert b'"gone"' in writes[0]["value"] and "publish it again" in writes[0]["reason"]
    assert {reason_class(r["reason"]) for r in rows} == {"retention"}
    assert all(r["batchId"] == 7 and r["time"] == 1000 for r in rows)
    assert lines == ["partition 0 offsets 2..9 (8 events, admin writes among them: PUT_KV_CONFIG namespace=ns "
                     "key=gone (partition 0, offset 3))",
                     "partition 1 offsets 0..3 (4 events, admin writes among them: none noted)"]


def test_what_a_read_finds_gone_after_the_plan_is_named_with_the_plans_loss():
    """The retention may remove more between a batch's plan and its read: the read says so in a
    loss row of the batch, which the step passes on and the sink names with what the plan named."""
    context = BatchContext.planned({"0": 1, "1": 30}, {"0": 12, "1": 60, LOST: {"0": [2, 9]}}, {})
    records = [{"partition": -2, "offset": 0, "timestamp": 0, "key": "b2/0", "value": context.to_json(report=True)},
               {"partition": LOSS_PARTITION, "offset": 40, "timestamp": 0, "key": "b2/0",
                "value": loss_row_value(1, 40, 48)}]
    kept, _, reports = batch_records(records)
    assert kept == [] and len(reports) == 2
    read = batch_read(reports, {})
    assert read.lost == [(0, 2, 9), (1, 40, 48)]
    # records read: 0 -> 12 from 1 less 7 lost; 1 -> 60 from 30 less 8 lost
    assert read.count == 4 + 22
    # a partition new since the previous batch counts nothing yet (as before), and never below zero
    assert BatchContext(start={"0": 1}, end={"0": 12, "1": 3}).read_count([(1, 0, 9)]) == 11
    assert BatchContext(start={}, end={"0": 5}).read_count([]) == 5
