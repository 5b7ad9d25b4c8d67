"""Spark's Kafka connector against the embedded Tansu broker and against Apache Kafka.

Tansu (the broker `./run.sh` embeds) answers a ListOffsets(latest) request with the *base* offset
of a partition's last record batch + 1, not the offset after its last record. Our Kafka source
fetches that last batch to find the true end (`eventlog.consumer.true_end`); Spark's connector
trusts the broker, so the records of a batch after its first stay unread until a later batch
moves the reported end past them. Apache Kafka reports the true end, and the connector reads
everything at once. These tests show both, exactly; the pipeline tests therefore run the
connector against Apache Kafka (tests/conftest.py, `SOURCES`).
"""

from __future__ import annotations

import time
import uuid

import pytest

from eventlog.consumer import consumer, true_end
from eventlog.publisher import EventPublisher
from eventlog.topics import ensure_topic
from tests.harness import Pipeline
from tests.helpers import DEFAULTS, hb, reg, topics

pytestmark = pytest.mark.integration


def one_batch_of_three(bootstrap: str, topic: str) -> list[tuple[int, int]]:
    """Three registrations sent in one producer batch (one partition, one flush)."""
    with EventPublisher(bootstrap, topic, max_message_bytes=DEFAULTS.max_message_bytes) as pub:
        return pub.publish([reg(f"tail-{i}", 0, f"127.0.0.1:{19100 + i}", tps=topics(f"Tail{i}", "TailBase"))
                            for i in range(3)])


def reported_and_true_end(bootstrap: str, topic: str) -> tuple[int, int]:
    from kafka import TopicPartition
    c = consumer(bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        reported = c.end_offsets([tp])[tp]
        return reported, true_end(c, tp, reported)
    finally:
        c.close()


@pytest.mark.parametrize("broker, reported_end", [("kafka_bootstrap", 1), ("apache_kafka", 3)])
def test_the_reported_end_of_a_partition(request, broker, reported_end):
    bootstrap = request.getfixturevalue(broker)
    topic = f"end-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, topic, 1)
    coords = one_batch_of_three(bootstrap, topic)
    assert [o for _, o in coords] == [0, 1, 2]
    # Tansu: the base offset of the last batch (0) + 1; Apache Kafka: after the last record.
    assert reported_and_true_end(bootstrap, topic) == (reported_end, 3)


def served(p: Pipeline, i: int) -> bool:
    return p.get(f"/topics/Tail{i}/route")[0] == 200


def test_on_tansu_the_connector_leaves_a_batch_tail_unread_until_more_data_arrives(spark, kafka_bootstrap, tmp_path,
                                                                                 figures):
    p = Pipeline(spark, kafka_bootstrap, tmp_path, NAMESRV_KAFKA_SOURCE="connector",
                 NAMESRV_KAFKA_PARTITIONS="1").start_job().start_http()
    try:
        one_batch_of_three(kafka_bootstrap, p.cfg.kafka_topic)
        p.wait_for(lambda: served(p, 0), 60, "the batch's first record")
        time.sleep(5)  # ten triggers: the connector still believes the partition ends at offset 1
        assert not served(p, 1) and not served(p, 2)
        started = time.monotonic()
        p.publish([hb("tail-0", 0, "127.0.0.1:19100")])  # a new batch moves the reported end past the tail
        p.wait_for(lambda: served(p, 1) and served(p, 2), 60, "the tail once another batch arrived")
        figures(f"connector on Tansu: a batch's tail waits for the next batch (served {time.monotonic() - started:.1f} s "
                "after it); our source reads it at once")
    finally:
        p.close()


@pytest.mark.parametrize("source, broker", [("python", "kafka_bootstrap"), ("connector", "apache_kafka")])
def test_every_record_of_a_batch_is_served_at_once(request, spark, tmp_path, source, broker):
    bootstrap = request.getfixturevalue(broker)
    p = Pipeline(spark, bootstrap, tmp_path, NAMESRV_KAFKA_SOURCE=source,
                 NAMESRV_KAFKA_PARTITIONS="1").start_job().start_http()
    try:
        p.wait_served(one_batch_of_three(bootstrap, p.cfg.kafka_topic), timeout=60)
        assert all(served(p, i) for i in range(3))
    finally:
        p.close()
