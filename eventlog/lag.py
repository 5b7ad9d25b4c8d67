"""How far what a server serves is behind the events topic, per partition.

Measured against the served cut (not the job's read position): an operator cares about events
published and not yet answered. Records: the log end minus the served offset. Seconds: the age of
the oldest record not yet served (its Kafka timestamp), 0 when none is waiting.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PartitionLag:
    partition: int
    records: int
    seconds: float


class LagProbe:
    """A Kafka consumer without a group, used only for end offsets and single-record peeks;
    answers are cached for `max_age_s` so a scrape storm costs one round trip."""

    def __init__(self, bootstrap: str, topic: str, *, max_age_s: float = 1.0, timeout_ms: int = 2000) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.max_age_s, self.timeout_ms = max_age_s, timeout_ms
        self._consumer: Any = None
        self._lock = threading.Lock()
        self._cached: tuple[float, list[PartitionLag]] | None = None

    def measure(self, served: dict[str, int]) -> list[PartitionLag]:
        """Per partition of the topic; raises OSError-like kafka errors when Kafka is unreachable."""
        with self._lock:
            now = time.monotonic()
            if self._cached is not None and now - self._cached[0] < self.max_age_s:
                return self._cached[1]
            try:
                result = self._measure(served)
            except Exception:
                self._drop()  # a fresh consumer next time, not one stuck on a dead connection
                raise
            self._cached = (now, result)
            return result

    def _open(self) -> Any:
        if self._consumer is None:
            from kafka import KafkaConsumer
            self._consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
                                           request_timeout_ms=max(self.timeout_ms, 1000) + 500,
                                           bootstrap_timeout_ms=self.timeout_ms, max_poll_records=1,
                                           consumer_timeout_ms=self.timeout_ms)
        return self._consumer

    def _measure(self, served: dict[str, int]) -> list[PartitionLag]:
        from kafka import TopicPartition
        consumer = self._open()
        parts = consumer.partitions_for_topic(self.topic) or set()
        tps = [TopicPartition(self.topic, p) for p in sorted(parts)]
        ends = consumer.end_offsets(tps) if tps else {}
        out = []
        now_ms = time.time() * 1000
        for tp in tps:
            at = int(served.get(str(tp.partition), 0))
            behind = max(0, ends[tp] - at)
            seconds = 0.0
            if behind:
                stamp = self._timestamp_at(consumer, tp, at)
                seconds = 0.0 if stamp is None else max(0.0, (now_ms - stamp) / 1000)
            out.append(PartitionLag(tp.partition, behind, seconds))
        return out

    def _timestamp_at(self, consumer: Any, tp: Any, offset: int) -> int | None:
        """The Kafka timestamp of the record at `offset` (None if it cannot be read in time)."""
        consumer.assign([tp])
        consumer.seek(tp, offset)
        polled = consumer.poll(timeout_ms=self.timeout_ms, max_records=1)
        for records in polled.values():
            for r in records:
                return int(r.timestamp)
        return None

    def _drop(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            finally:
                self._consumer = None

    def close(self) -> None:
        with self._lock:
            self._drop()
