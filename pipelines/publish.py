"""Publishing events to the events topic (kafka-python), for the simulator, HTTP writes and tests."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from schemas.events import encode


class EventPublisher:
    """A thin, synchronous producer: `publish` returns once every event is acknowledged."""

    def __init__(self, bootstrap: str, topic: str, *, max_request_size: int = 32 * 1024 * 1024) -> None:
        from kafka import KafkaProducer
        self.topic = topic
        self._producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5,
                                       max_request_size=max_request_size, request_timeout_ms=10_000,
                                       max_block_ms=10_000, bootstrap_timeout_ms=10_000,
                                       delivery_timeout_ms=20_000)

    def publish(self, events: Iterable[Mapping[str, Any]]) -> list[tuple[int, int]]:
        """Send events in order; returns their (partition, offset) coordinates."""
        futures = [self._producer.send(self.topic, key=k, value=v) for k, v in map(encode, events)]
        self._producer.flush()
        return [(m.partition, m.offset) for m in (f.get(timeout=15) for f in futures)]

    def publish_raw(self, records: Iterable[tuple[bytes | None, bytes | None]]) -> list[tuple[int, int]]:
        """Send raw (key, value) records as they are: for tests that need malformed input."""
        futures = [self._producer.send(self.topic, key=k, value=v) for k, v in records]
        self._producer.flush()
        return [(m.partition, m.offset) for m in (f.get(timeout=30) for f in futures)]

    def close(self) -> None:
        self._producer.close(timeout=5)

    def __enter__(self) -> "EventPublisher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
