"""Issue 34: the events topic keeps events for its retention only. A job down longer than that
resumes past what the log still holds: it says which offsets it lost (its log, dead_letter, a
metric), names the admin writes among them, and the fleet's next re-registrations restore every
route. Against Apache Kafka, the embedded broker of `./run.sh`, which applies the retention."""

from __future__ import annotations

import logging
import shutil
import time

import pytest
import requests
from deltalake import DeltaTable

from ops import embedded_kafka
from ops.net import free_port
from routeinfo.state import topic_keys_digest
from schemas import events as ev
from tests.harness import Pipeline
from tests.helpers import reg, topics

pytestmark = pytest.mark.integration

RETENTION_MS = 2000
LOST_PREFIX = "lost to the events topic's retention"


def _log_starts(bootstrap: str, topic: str) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or ())]
        return {tp.partition: int(o) for tp, o in c.beginning_offsets(tps).items()}
    finally:
        c.close()


def _set_retention(bootstrap: str, topic: str, ms: int) -> None:
    """The topic's retention (and segment roll) time, changed while it runs, as an operator would:
    short only while the job is down, so that what the job should read is never removed first."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                            configs={"retention.ms": str(ms), "segment.ms": str(ms)})])
    finally:
        admin.close()


def _lost_metric(url: str) -> float:
    total = 0.0
    for line in requests.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("namesrv_job_events_lost_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_job_down_past_the_retention_says_what_it_lost_and_the_fleet_restores_the_routes(
        spark, tmp_path, caplog, figures):
    if shutil.which("java") is None:
        pytest.skip("Java 17+ is not on PATH: Apache Kafka cannot start")
    port = free_port()
    kafka = embedded_kafka.start_kafka(port, tmp_path / "kafka", tmp_path / "kafka.log", retention_check_ms=500)
    p = None
    try:
        p = Pipeline(spark, f"127.0.0.1:{port}", tmp_path / "ns")
        p.start_job().start_http()
        a, b, c = "127.0.0.1:33911", "127.0.0.1:33921", "127.0.0.1:33931"
        fleet = {"rt-a": (a, topics("RtTopic", "RtA")), "rt-b": (b, topics("RtTopic", "RtB"))}
        p.wait_served(p.publish([reg(n, 0, addr, tps=tps, cluster="RtCluster") for n, (addr, tps) in fleet.items()]))
        assert p.write("PUT", "/kv/rtns/kept", {"value": "read-in-time"}) == (200, {"value": "read-in-time"})

        p.stop_job()
        _set_retention(p.cfg.bootstrap, p.cfg.kafka_topic, RETENTION_MS)
        # While the job is down: an admin's KV write (accepted, not applied), a new broker's first
        # registration, and a re-registration of rt-a with one more topic.
        status, body = p.write("PUT", "/kv/rtns/dropped?wait=false", {"value": "never-applied"})
        assert status == 202, body
        ((kv_partition, kv_offset),) = [(o["partition"], o["offset"]) for o in body["offsets"]]
        fleet["rt-c"] = (c, topics("RtNew", "RtC"))
        fleet["rt-a"] = (a, topics("RtTopic", "RtA", "RtA2"))
        first_c = reg("rt-c", 0, c, tps=fleet["rt-c"][1], cluster="RtCluster")
        lost = p.publish([first_c, reg("rt-a", 0, a, tps=fleet["rt-a"][1], cluster="RtCluster", counter=2)])
        lost.append((kv_partition, kv_offset))
        down_at = time.monotonic()

        def removed() -> bool:
            # an append rolls the segment once it is RETENTION_MS old; the broker then deletes it
            p.publish([reg("rt-b", 0, b, tps=fleet["rt-b"][1], cluster="RtCluster")])
            starts = _log_starts(p.cfg.bootstrap, p.cfg.kafka_topic)
            return all(starts.get(part, 0) > off for part, off in lost)
        p.wait_for(removed, 60, "the retention to remove what was published while the job was down")
        removed_after = time.monotonic() - down_at
        _set_retention(p.cfg.bootstrap, p.cfg.kafka_topic, 3_600_000)  # nothing more goes while the job catches up

        caplog.set_level(logging.WARNING)
        p.start_job()
        table = str(p.cfg.warehouse / "dead_letter")

        def named() -> list[dict]:
            rows = DeltaTable(table).to_pyarrow_table().to_pylist() if DeltaTable.is_deltatable(table) else []
            return [r for r in rows if r["reason"].startswith(LOST_PREFIX)]
        rows = p.wait_for(lambda: [r for r in named() if r["value"] is not None] and named(), 90,
                          "the lost events in dead_letter")
        ranges = [r for r in rows if r["value"] is None]
        writes = [r for r in rows if r["value"] is not None]
        # every lost offset lies in a range the job named, and the admin write among them is named with its body
        assert all(any(r["partition"] == part and r["offset"] <= off for r in ranges) for part, off in lost), ranges
        assert [(w["partition"], w["offset"], w["key"]) for w in writes] == [(kv_partition, kv_offset, "kv/rtns")]
        assert b'"never-applied"' in writes[0]["value"] and "PUT_KV_CONFIG" in writes[0]["reason"]
        lost_count = sum(int(r["reason"].split("(", 1)[1].split()[0]) for r in ranges)
        assert lost_count >= len(lost)
        said = [r.getMessage() for r in caplog.records if "events lost to the topic's retention" in r.getMessage()]
        assert said and any("PUT_KV_CONFIG namespace=rtns key=dropped" in s for s in said), said
        p.wait_for(lambda: _lost_metric(p.url) >= lost_count, 30, "namesrv_job_events_lost_total")

        # What was lost is not applied; what the job had read is kept.
        assert p.get("/kv/rtns/dropped")[0] == 404
        assert p.get("/kv/rtns/kept") == (200, {"value": "read-in-time"})
        assert p.get("/topics/RtNew/route")[0] == 404
        # A repeat of the lost registration, published small as the remoting front does, names a
        # body the log no longer holds: dead-lettered with that reason, and nothing registered.
        repeat_at = p.publish([ev.repeated_registration_event(
            first_c, [lost[0][1]], topic_keys_digest(first_c["topicConfigTable"]), timestamp=int(time.time() * 1000))])
        p.wait_served(repeat_at)
        said = [r["reason"] for r in DeltaTable(table).to_pyarrow_table().to_pylist()
                if (r["partition"], r["offset"]) == repeat_at[0]]
        assert len(said) == 1 and "no longer in the event log" in said[0], said
        assert p.get("/topics/RtNew/route")[0] == 404
        # The fleet's next re-registrations (every 30 s in RocketMQ) restore every route.
        p.wait_served(p.publish([reg(n, 0, addr, tps=tps, cluster="RtCluster", counter=3)
                                 for n, (addr, tps) in fleet.items()]))
        for topic, owners in {"RtTopic": {"rt-a", "rt-b"}, "RtA2": {"rt-a"}, "RtNew": {"rt-c"}}.items():
            status, route = p.get(f"/topics/{topic}/route")
            assert status == 200 and {q["brokerName"] for q in route["queueDatas"]} == owners, (topic, route)
        p.check_job()
        figures(f"retention: a job down past a {RETENTION_MS / 1000:.0f} s retention ({removed_after:.1f} s until "
                f"Kafka removed the events) named {lost_count} lost event(s) in {len(ranges)} range(s) and "
                f"{len(writes)} admin write; re-registrations restored every route")
    finally:
        if p is not None:
            p.close()
        kafka.terminate()
        try:
            kafka.wait(20)
        except Exception:
            kafka.kill()
