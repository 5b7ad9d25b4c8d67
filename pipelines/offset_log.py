"""Spark's offset log (`<checkpoint>/offsets/<batchId>`): what a micro-batch read, and its log clock.

Spark writes a batch's end offsets before the batch runs and reads the same file when it
replays the batch after a crash, so anything derived from it is the same on every run of that
batch. The sink reads the Kafka offsets from it; the state step reads the log clock that our
source puts next to them (`LOG_CLOCK`, see `pipelines/kafka_source.py`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOG_CLOCK = "clock"  # our source's offset entry: the batch's log clock (epoch ms)


def read_source_offsets(path: Path) -> dict[str, Any]:
    """The first source's offsets as written (empty when the file does not exist): ours,
    {"<partition>": offset, "tick": n, "clock": ms}, or the Kafka connector's
    {"<topic>": {"<partition>": offset}}."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    # line 0: format version, line 1: batch metadata, then one line per source
    for line in lines[2:]:
        if line.strip() and line.strip() != "-":
            raw = json.loads(line)
            if isinstance(raw, str):
                raw = json.loads(raw)
            return dict(raw)
    return {}


def partition_offsets(raw: dict[str, Any]) -> dict[str, int]:
    """Kafka partition -> next offset, from either source's offsets."""
    offsets: dict[str, int] = {}
    for key, value in raw.items():
        if isinstance(value, dict):
            offsets.update({str(p): int(o) for p, o in value.items()})
        elif str(key).isdigit():  # Kafka partitions, not "tick" or "clock"
            offsets[str(key)] = int(value)
    return offsets


def read_offset_log(path: Path) -> dict[str, int]:
    return partition_offsets(read_source_offsets(path))


@dataclass(frozen=True)
class LogClock:
    """Receiver-side time for one batch, from what the job has read of the log.

    Every record of the batch was appended after `since` (the previous batch's clock: that
    batch had read everything before it) and no later than `until` (this batch's clock: when
    it read to the log's end, the time it looked; while it lags, the time of the newest record
    it read). Liveness times are clamped into [since, until] and expiry runs at `until`, so a
    backlog is judged on the log's timeline, never on a wall clock that ran ahead of it.
    None: not known (Spark's Kafka connector, the first batch) — no bound on that side."""

    since: int | None = None
    until: int | None = None

    def receive_time(self, record_time_ms: int, now_ms: int) -> int:
        """A record's time bounded by what the log says about when it arrived, never after now."""
        t = min(record_time_ms, now_ms if self.until is None else min(self.until, now_ms))
        return t if self.since is None else max(t, min(self.since, now_ms))

    def expiry_time(self, now_ms: int) -> int:
        return now_ms if self.until is None else min(self.until, now_ms)


class BatchClocks:
    """The log clock of a batch, read from the offset log once per batch per process."""

    def __init__(self, checkpoint_dir: Path) -> None:
        self._offsets = checkpoint_dir / "offsets"
        self._cached: tuple[int, LogClock] | None = None

    def clock(self, batch_id: int | None) -> LogClock:
        if batch_id is None:
            return LogClock()
        if self._cached is None or self._cached[0] != batch_id:
            until = read_source_offsets(self._offsets / str(batch_id)).get(LOG_CLOCK)
            since = read_source_offsets(self._offsets / str(batch_id - 1)).get(LOG_CLOCK) if batch_id > 0 else None
            self._cached = (batch_id, LogClock(since=None if since is None else int(since),
                                               until=None if until is None else int(until)))
        return self._cached[1]
