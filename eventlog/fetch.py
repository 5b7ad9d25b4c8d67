"""Reading given records of the events topic back: the body of a registration a repeat names.

A broker re-sends the same REGISTER_BROKER every 30 s; the remoting front publishes each repeat
as a small event naming the full registration's offsets (schemas.events.repeated_registration_event).
The job reads that body only when its rules need the topic table (routeinfo.route_writes.NeedsBody):
an address new to its group again, a moved data version, a topic removed meanwhile. That is rare
in a settled fleet, so one consumer per Python worker, created on first use, is enough. It is not
rare in a registration wave that outruns the job: brokers expire before their re-registrations
are read, and each such repeat needs its body. A read of one body costs a seek and a fetch round
trip, and a fetch brings a megabyte of the records after it (`consumer.FETCH_BYTES`); so every record a read brings is
kept for the rest of the batch (`begin`), and the bodies a batch needs, published close together
in the log, are mostly read once (100,000 brokers: batches of 5,000 records took minutes of
round trips).
"""

from __future__ import annotations

import time
from typing import Any

KEEP_BYTES = 64 * 1024 * 1024  # of records read for one batch, per Python worker


class LogUnreadable(RuntimeError):
    """The log could not be read (no answer within the timeout): the batch fails and Spark runs it again."""


class RecordFetcher:
    """`fetcher(partition, offsets)` → the values at those offsets of `topic`, None for one the
    log no longer holds (its retention removed it, or a reset log never had it)."""

    def __init__(self, bootstrap: str, topic: str, *, timeout_s: float = 10.0,
                 keep_bytes: int = KEEP_BYTES) -> None:
        self.bootstrap, self.topic, self.timeout_s = bootstrap, topic, timeout_s
        self._consumer: Any = None
        self._keep_bytes = keep_bytes
        self._seen: dict[tuple[int, int], bytes | None] = {}  # (partition, offset) -> value, this batch's reads
        self._seen_bytes = 0
        self._batch: int | None = None
        self.fetches = 0  # reads that went to the broker (the others were served from this batch's reads)

    def begin(self, batch: int) -> None:
        """The batch the next reads are for (its processing time). What was read for another batch
        is forgotten: a log reset between batches gives old offsets other records."""
        if batch != self._batch:
            self._batch = batch
            self._seen.clear()
            self._seen_bytes = 0

    def _keep(self, partition: int, offset: int, value: bytes | None) -> None:
        size = len(value or b"")
        if self._seen_bytes + size > self._keep_bytes:  # bounded: start again rather than grow
            self._seen.clear()
            self._seen_bytes = 0
        self._seen[(partition, offset)] = value
        self._seen_bytes += size

    def __call__(self, partition: int, offsets: list[int]) -> list[bytes | None]:
        from kafka import TopicPartition
        from kafka.errors import OffsetOutOfRangeError

        from eventlog.consumer import consumer, true_end
        if all((partition, o) in self._seen for o in offsets):
            return [self._seen[(partition, o)] for o in offsets]
        self.fetches += 1
        if self._consumer is None:
            self._consumer = consumer(self.bootstrap, offset_reset="none", fetch_max_wait_ms=100)
        c = self._consumer
        tp = TopicPartition(self.topic, partition)
        try:
            end = true_end(c, tp, c.end_offsets([tp])[tp])
        except Exception as exc:  # kafka-python's errors, a timeout: the log cannot be read now
            raise LogUnreadable(f"{self.topic}/{partition}: its end is unknown ({exc})") from exc
        wanted = {o for o in offsets if o < end}  # past the end: a reset log that never had them
        found: dict[int, bytes | None] = {}
        if not wanted:
            return [None for _ in offsets]
        c.assign([tp])
        c.seek(tp, min(wanted))
        deadline = time.monotonic() + self.timeout_s
        while wanted - found.keys():
            if time.monotonic() > deadline:
                raise LogUnreadable(f"{self.topic}/{partition}: offsets {sorted(wanted - found.keys())[:5]} "
                                    f"not read within {self.timeout_s:.0f} s")
            try:
                polled = c.poll(timeout_ms=200).get(tp, [])
            except OffsetOutOfRangeError:  # before the log's start: removed by the retention
                return [found.get(o) for o in offsets]
            for rec in polled:
                self._keep(partition, rec.offset, rec.value)
                if rec.offset in wanted:
                    found[rec.offset] = rec.value
            if polled and polled[-1].offset >= max(wanted):
                break  # the log went past them: those not seen are not in it (a reset log)
        return [found.get(o) for o in offsets]

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
