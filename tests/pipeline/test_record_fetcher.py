"""Reading registration bodies back from the log (eventlog/fetch.py) against a real broker: the
bodies one batch needs, published close together, are read from the broker once, and what was
read for one batch is never served to another."""

from __future__ import annotations

import uuid

import pytest

from eventlog.fetch import RecordFetcher
from eventlog.publisher import EventPublisher
from eventlog.topics import ensure_topic
from tests.helpers import DEFAULTS, reg, topics

pytestmark = pytest.mark.integration


def _published(bootstrap: str, count: int) -> tuple[str, list[int]]:
    """A new one-partition topic holding `count` registrations (broker f-<i>); their offsets."""
    topic = f"fetch-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, topic, 1, {})
    with EventPublisher(bootstrap, topic, max_message_bytes=DEFAULTS.max_message_bytes) as pub:
        coords = pub.publish([reg(f"f-{i}", 0, f"10.0.0.{i + 1}:10911", tps=topics(f"F{i}", "FBase"))
                              for i in range(count)])
    return topic, [o for _, o in coords]


def test_one_batchs_bodies_are_read_from_the_broker_once_and_forgotten_by_the_next(kafka_bootstrap):
    topic, offsets = _published(kafka_bootstrap, 60)
    fetch = RecordFetcher(kafka_bootstrap, topic)
    try:
        fetch.begin(1)
        first = fetch(0, [offsets[10]])
        assert first[0] is not None and b'"f-10"' in first[0]
        # the next bodies of the batch, later in the log: already read with the first
        for i in (11, 30, 59):
            (value,) = fetch(0, [offsets[i]])
            assert value is not None and f'"f-{i}"'.encode() in value
        assert fetch.fetches == 1
        (earlier,) = fetch(0, [offsets[3]])  # before the first read: from the broker
        assert earlier is not None and b'"f-3"' in earlier and fetch.fetches == 2
        assert fetch(0, [offsets[-1] + 5]) == [None]  # past the log's end: none, as before
        # another batch reads from the broker again (a log reset between batches reuses offsets)
        fetch.begin(2)
        (again,) = fetch(0, [offsets[30]])
        assert again is not None and b'"f-30"' in again and fetch.fetches == 4
    finally:
        fetch.close()


def test_what_a_batch_keeps_is_bounded(kafka_bootstrap):
    topic, offsets = _published(kafka_bootstrap, 40)
    fetch = RecordFetcher(kafka_bootstrap, topic, keep_bytes=2_000)  # a few records' worth
    try:
        fetch.begin(1)
        for o in offsets:
            (value,) = fetch(0, [o])
            assert value is not None
        assert fetch._seen_bytes <= 2_000
        assert fetch.fetches > 1  # the bound made it read again
    finally:
        fetch.close()


def test_a_record_larger_than_a_fetch_is_read_whole(kafka_bootstrap):
    """A fetch asks for FETCH_BYTES (1 MiB) of records, and the broker answers with its first
    batch whole whatever its size: a 3 MB record (an oversize one, for dead_letter) is read, and
    so are the records after it."""
    from kafka import KafkaProducer

    from eventlog.consumer import FETCH_BYTES
    topic = f"fetch-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka_bootstrap, topic, 1, {})
    big = b"x" * (3 * 1024 * 1024)
    assert len(big) > FETCH_BYTES
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, max_request_size=4 * len(big))
    try:
        sent = [producer.send(topic, v) for v in (b"before", big, b"after")]
        producer.flush()
        offsets = [f.get(timeout=10).offset for f in sent]
    finally:
        producer.close()
    fetch = RecordFetcher(kafka_bootstrap, topic)
    try:
        fetch.begin(1)
        assert fetch(0, [offsets[1]]) == [big]
        assert fetch(0, [offsets[2]]) == [b"after"]
    finally:
        fetch.close()
