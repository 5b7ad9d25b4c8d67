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

from eventlog.consumer import consumer, record_time, true_end


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
            self._consumer = consumer(self.bootstrap, bootstrap_timeout_ms=self.timeout_ms)
        return self._consumer

    def _measure(self, served: dict[str, int]) -> list[PartitionLag]:
        from kafka import TopicPartition
        c = self._open()
        tps = [TopicPartition(self.topic, p) for p in sorted(c.partitions_for_topic(self.topic) or set())]
        reported = c.end_offsets(tps) if tps else {}
        out = []
        now_ms = time.time() * 1000
        for tp in tps:
            at = int(served.get(str(tp.partition), 0))
            behind = max(0, true_end(c, tp, reported[tp]) - at)  # Tansu reports a batch's base offset
            seconds = 0.0
            if behind:
                stamp = record_time(c, tp, at, timeout_s=self.timeout_ms / 1000)
                seconds = 0.0 if stamp is None else max(0.0, (now_ms - stamp) / 1000)
            out.append(PartitionLag(tp.partition, behind, seconds))
        return out

    def _drop(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            finally:
                self._consumer = None

    def close(self) -> None:
        with self._lock:
            self._drop()
