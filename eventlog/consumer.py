"""Reading the events topic: one consumer configuration, and the true end of a partition.

Tansu reports a partition's end offset as the *base* offset of its last record batch plus
one, so the true end is found by fetching that last batch (`true_end`); with a broker that
reports the real end the fetch finds nothing newer and the reported value stands.
"""

from __future__ import annotations

from typing import Any

from eventlog.topics import no_topic_creation

# Bytes a fetch asks for, per partition and in all: Apache Kafka's consumer default. A broker
# answers a fetch with its first record batch whole whatever its size (KIP-74, fetch v3 on; Tansu
# too), so a record larger than this (an oversize one, for dead_letter) is still read. A fetch asks
# for the records after its offset, to the log's end: at 64 MiB, each read of a batch's range and
# each read of a repeat's body brought the whole backlog of a registration wave (100,000 brokers:
# tens of MB a fetch, seconds of parsing), and the job's reads stopped getting answers within
# their timeout, while the broker spent most of a core sending (by hand, 2026-11-29).
FETCH_BYTES = 1024 * 1024


def consumer(bootstrap: str, *, bootstrap_timeout_ms: int = 30_000, fetch_max_wait_ms: int = 500,
             offset_reset: str = "latest") -> Any:
    """A consumer without a group (offsets are the streaming checkpoint's business);
    `bootstrap_timeout_ms` bounds how long creating it waits for an unreachable broker,
    `fetch_max_wait_ms` how long a fetch waits at the broker for records, `offset_reset` where a
    read of an offset the log no longer holds goes on (kafka-python's `auto_offset_reset`): the
    job's planner takes `earliest` and its reads `none`, so that what the topic's retention removed
    is told, never jumped over to the end."""
    from kafka import KafkaConsumer
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                      auto_offset_reset=offset_reset,
                      max_partition_fetch_bytes=FETCH_BYTES, fetch_max_bytes=FETCH_BYTES,
                      request_timeout_ms=10_000, consumer_timeout_ms=1000, fetch_max_wait_ms=fetch_max_wait_ms,
                      bootstrap_timeout_ms=bootstrap_timeout_ms, allow_auto_create_topics=False)
    no_topic_creation(c._cluster)
    return c


def record_time(consumer: Any, tp: Any, offset: int, *, timeout_s: float = 2.0) -> int | None:
    """The Kafka timestamp of the record at `offset` (None if it cannot be read in time). A fetch
    may start at its batch's base offset, so records before `offset` are skipped."""
    import time
    consumer.assign([tp])
    consumer.seek(tp, offset)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for rec in consumer.poll(timeout_ms=200, max_records=1).get(tp, []):
            if rec.offset == offset:
                return int(rec.timestamp)
            consumer.seek(tp, offset)
    return None


def true_end(consumer: Any, tp: Any, reported: int) -> int:
    """The partition's real end offset: fetch the last record batch and take its last offset + 1.

    A consumer that read at an offset the topic's retention removed (`offset_reset="none"`) may
    still raise that position's OffsetOutOfRangeError from the poll after the seek here (its fetch
    was in flight): that answer is about the old position, so it is passed over, not raised (a
    caller that took it for an unreachable broker looked again, met it again, and never learnt
    that the offsets were gone)."""
    from kafka.errors import OffsetOutOfRangeError
    if reported <= 0:
        return reported
    consumer.assign([tp])
    consumer.seek(tp, reported - 1)
    for _ in range(3):
        try:
            batch = consumer.poll(timeout_ms=200).get(tp, [])
        except OffsetOutOfRangeError:
            consumer.seek(tp, reported - 1)
            continue
        if batch:
            return max(reported, int(batch[-1].offset) + 1)
    return reported
