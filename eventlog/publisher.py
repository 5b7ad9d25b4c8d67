"""Publishing events to the events topic: HTTP writes, the simulator, benchmarks and tests."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from eventlog.journal import AdminJournal
from eventlog.topics import no_topic_creation
from schemas.events import (
    REGISTER_BROKER,
    TYPE_HEADER,
    Fingerprinted,
    chunk_registration,
    encode,
    fingerprint_header,
    record_of,
)

# The producer's transport ceiling, above the event limit on purpose: a record the contract
# refuses still reaches the topic (via publish_raw) and lands in dead_letter with its reason,
# instead of vanishing in a producer error.
_MAX_REQUEST_BYTES = 32 * 1024 * 1024


class EventPublisher:
    """A thin, synchronous producer: `publish` returns once every event is acknowledged.

    `max_message_bytes` is the pipeline's per-record limit (NAMESRV_MAX_MESSAGE_BYTES): a
    registration larger than that is published as chunks; any other event that large is
    refused before anything is sent.
    """

    def __init__(self, bootstrap: str, topic: str, *, max_message_bytes: int,
                 max_request_size: int = _MAX_REQUEST_BYTES, connect_timeout_ms: int = 10_000,
                 journal: AdminJournal | None = None) -> None:
        """`connect_timeout_ms` bounds how long a send waits for an unreachable broker (the
        remoting front uses less than mqadmin's 5 s, so its error arrives in time). `journal`:
        where the admin writes published are noted (a server's publisher; None: not noted)."""
        from kafka import KafkaProducer
        self.topic = topic
        self.journal = journal
        self.max_message_bytes = max_message_bytes
        # acks=all: a write is acknowledged once every in-sync replica has it (min.insync.replicas
        # of a cluster, ops/apache_kafka.start_cluster), so a leader's crash loses nothing that was
        # acknowledged; with one broker it is acks=1. Idempotence (kafka-python's default with
        # acks=all) stays off, as it was with acks=1: a broker whose log was wiped answers an
        # idempotent producer UnknownProducerIdError, and a repeated event changes nothing here.
        self._producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False, linger_ms=5,
                                       max_request_size=max_request_size, request_timeout_ms=10_000,
                                       max_block_ms=connect_timeout_ms, bootstrap_timeout_ms=connect_timeout_ms,
                                       delivery_timeout_ms=20_000, allow_auto_create_topics=False)
        no_topic_creation(self._producer._metadata)

    def warm(self) -> None:
        """Fetch the topic's metadata now, so that the first publish does not wait for it."""
        self._producer.partitions_for(self.topic)

    def publish(self, events: Iterable[Mapping[str, Any]]) -> list[tuple[int, int]]:
        """Send events in order; returns their (partition, offset) coordinates (one per record:
        a chunked registration yields one per chunk)."""
        return [c for group in self.publish_groups([list(events)]) for c in group]

    def publish_groups(self, groups: Sequence[Sequence[Mapping[str, Any]]]) -> list[list[tuple[int, int]]]:
        """Several writers' events in order, with one flush: each group's coordinates. A server
        that publishes what arrived together this way sends one produce request, not one each."""
        records = [[(r, e["type"], headers) for e in events for r, headers in self._records(e)] for events in groups]
        futures = [[self._producer.send(self.topic, key=k, value=v, headers=headers)
                    for (k, v), _, headers in group] for group in records]
        self._producer.flush()
        coords = [[(m.partition, m.offset) for m in (f.get(timeout=15) for f in group)] for group in futures]
        if self.journal is not None:  # only a registration may be chunked: every other event is one record
            for events, group, at in zip(groups, records, coords, strict=True):
                self.journal.record([e for e in events if e["type"] != REGISTER_BROKER],
                                    [c for (_, etype, _), c in zip(group, at, strict=True) if etype != REGISTER_BROKER])
        return coords

    def _records(self, event: Mapping[str, Any]) -> list[tuple[tuple[bytes, bytes], list[tuple[str, bytes]]]]:
        """The event's records, each with its headers. The type header lets the source tell liveness
        signals (which may wait) from changes; a registration published whole carries its request's
        fingerprint (liveness/fingerprint.py)."""
        headers = [(TYPE_HEADER, str(event["type"]).encode())]
        key, value = record_of(event)
        if len(value) <= self.max_message_bytes:
            if isinstance(event, Fingerprinted):
                headers.append(fingerprint_header(event.fingerprint))
            return [((key, value), headers)]
        if event["type"] == REGISTER_BROKER:
            return [(encode(c), headers) for c in chunk_registration(event, self.max_message_bytes)]
        raise ValueError(f"{event['type']} of {len(value)} bytes exceeds the {self.max_message_bytes}-byte "
                         "message limit (NAMESRV_MAX_MESSAGE_BYTES)")

    def publish_raw(self, records: Iterable[tuple[bytes | None, bytes | None]]) -> list[tuple[int, int]]:
        """Send raw (key, value) records as they are: for tests that need malformed input."""
        futures = [self._producer.send(self.topic, key=k, value=v) for k, v in records]
        self._producer.flush()
        return [(m.partition, m.offset) for m in (f.get(timeout=30) for f in futures)]

    def close(self) -> None:
        self._producer.close(timeout=5)

    def __enter__(self) -> EventPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ReconnectingPublisher:
    """An EventPublisher built on first use and forgotten after a failed publish, so the next
    write connects afresh: what a long-running server (HTTP writes, the remoting front) needs
    when Kafka goes away and comes back. A failed publish re-raises; nothing was acknowledged."""

    def __init__(self, factory: Callable[[], EventPublisher]) -> None:
        self._factory = factory
        self._publisher: EventPublisher | None = None
        self._lock = threading.Lock()

    def publish(self, events: Iterable[Mapping[str, Any]]) -> list[tuple[int, int]]:
        return [c for group in self.publish_groups([list(events)]) for c in group]

    def connect(self) -> None:
        """Build the publisher and fetch the topic's metadata ahead of the first publish (a
        starting fleet's first registrations are the first publishes); raises as a publish would."""
        publisher = self._current()
        try:
            publisher.warm()
        except Exception:
            self._forget(publisher)
            raise

    def _current(self) -> EventPublisher:
        with self._lock:
            if self._publisher is None:
                self._publisher = self._factory()
            return self._publisher

    def publish_groups(self, groups: Sequence[Sequence[Mapping[str, Any]]]) -> list[list[tuple[int, int]]]:
        publisher = self._current()
        try:
            return publisher.publish_groups(groups)
        except Exception:
            self._forget(publisher)
            raise

    def _forget(self, publisher: EventPublisher) -> None:
        with self._lock:
            if self._publisher is publisher:
                self._publisher = None
        try:
            publisher.close()
        except Exception:  # a broken producer may fail to close; it is dropped either way
            pass

    def close(self) -> None:
        with self._lock:
            publisher, self._publisher = self._publisher, None
        if publisher is not None:
            self._forget(publisher)
