"""The request's fingerprint travels in the record (schemas.events.FINGERPRINT_HEADER), on a real broker."""

from __future__ import annotations

import json
import uuid

from eventlog.consumer import consumer
from eventlog.publisher import EventPublisher
from eventlog.topics import ensure_topic
from liveness.fingerprint import of_request
from schemas import events as ev


def _registration(topics: int) -> dict:
    return ev.register_broker_event(cluster="C", broker_name="b", broker_id=0, addr="10.0.0.1:10911",
                                    topics={f"T{i}": {"topicName": f"T{i}", "perm": 6} for i in range(topics)},
                                    data_version={"timestamp": 1, "counter": 1, "stateVersion": 0}, timestamp=1)


def _read(bootstrap: str, topic: str, count: int) -> list:
    """The first `count` records of the topic's partition 0 (at most 20 s of polls)."""
    from kafka import TopicPartition
    c = consumer(bootstrap, offset_reset="earliest")
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        records: list = []
        for _ in range(10):
            if len(records) >= count:
                break
            records += c.poll(timeout_ms=2000).get(tp, [])
    finally:
        c.close()
    return records


def test_a_whole_registration_carries_its_request_fingerprint_and_a_chunk_none(kafka_bootstrap):
    topic = f"fp-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka_bootstrap, topic, 1, {})
    fingerprint = of_request({"brokerName": "b"}, 453, b"body")
    with EventPublisher(kafka_bootstrap, topic, max_message_bytes=4096) as pub:
        whole = pub.publish([ev.Fingerprinted(_registration(2), fingerprint)])
        chunked = pub.publish([ev.Fingerprinted(_registration(200), fingerprint)])
        plain = pub.publish([_registration(2)])
    assert len(whole) == 1 and len(chunked) > 1 and len(plain) == 1
    records = _read(kafka_bootstrap, topic, 2 + len(chunked))
    headers = [dict(r.headers) for r in records]
    assert all(h[ev.TYPE_HEADER] == ev.REGISTER_BROKER.encode() for h in headers)
    assert ev.header_fingerprint(headers[0].get(ev.FINGERPRINT_HEADER)) == fingerprint
    assert all(ev.FINGERPRINT_HEADER not in h for h in headers[1:])  # chunks and other producers: none


def test_an_event_s_validated_record_is_published_as_it_was_validated(kafka_bootstrap):
    """The front validates a registration's record and the publisher sends those bytes, not an
    encoding of its own (the event is encoded once)."""
    topic = f"fp-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka_bootstrap, topic, 1, {})
    event = _registration(2)
    key, _ = ev.encode(event)
    validated = json.dumps(event, indent=1).encode()  # not what ev.encode writes
    with EventPublisher(kafka_bootstrap, topic, max_message_bytes=4096) as pub:
        pub.publish([ev.Fingerprinted(event, b"\x01" * 16, (key, validated))])
    assert [(r.key, r.value) for r in _read(kafka_bootstrap, topic, 1)] == [(key, validated)]


def test_a_header_that_is_not_hex_is_no_fingerprint():
    assert ev.header_fingerprint(b"zz") is None
    assert ev.header_fingerprint(b"\xff") is None
    assert ev.header_fingerprint(None) is None
