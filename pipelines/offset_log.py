"""Our source's offsets: what Spark records for each micro-batch and hands back to the source.

Beside the Kafka offsets, the source puts entries of its own into a batch's end offsets (the log
clock, the outage floor, the log resets, what the plan found gone). Spark writes them before the
batch runs and hands the same ones back to the source when it replays the batch, so the context
the source builds from them (`pipelines/batch_context.py`) is the same on every run of that batch.
No code here or elsewhere reads Spark's files: the offsets reach the source through Spark's API.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

LOG_CLOCK = "clock"  # our source's offset entry: the batch's log clock per partition (epoch ms)
# our source's offset entry: when it could read the log again after it could not (epoch ms; the
# newest such moment, carried in every later batch's offsets)
RESUMED = "resumed"
# our source's offset entry: per partition, how many times its log went back under the job (a wiped
# or recreated log, read again from its start), carried in every later batch's offsets. A write
# published into a log that went back has an offset the job already claims to have read; a reader
# tells it is served only once the job counted that reset (`snapshots.freshness.LogMark`).
RESETS = "resets"
# our source's offset entry, in the batch that found it only: per partition, [first, end) of the
# offsets the batch was to read that the log no longer holds (its retention removed them before
# the job read them). The batch reads from `end`; the sink names what was lost (dead_letter).
LOST = "lost"


def log_resets(raw: Mapping[str, Any]) -> dict[str, int]:
    """Partition -> how many times its log went back under the job (`RESETS`; none: empty)."""
    resets = raw.get(RESETS)
    return {str(p): int(n) for p, n in resets.items()} if isinstance(resets, dict) else {}


def lost_ranges(raw: Mapping[str, Any]) -> dict[int, tuple[int, int]]:
    """Partition -> (first, end) of the offsets a batch found gone from the log (`LOST`; none: empty)."""
    lost = raw.get(LOST)
    return {int(p): (int(r[0]), int(r[1])) for p, r in lost.items()} if isinstance(lost, dict) else {}


def partition_offsets(raw: Mapping[str, Any]) -> dict[str, int]:
    """Kafka partition -> next offset, from the source's offsets (not `tick` or our own entries)."""
    return {str(k): int(v) for k, v in raw.items() if str(k).isdigit()}


@dataclass(frozen=True)
class LogClock:
    """Receive-time bounds for one batch, per Kafka partition, from what the job has read of the log.

    Every record the batch reads in partition p was appended after `since[p]` (the previous
    batch's clock there: that batch had read everything before it) and no later than `until[p]`
    (this batch's clock: when it read p to its end, the time it looked; while it lags, the time
    of the newest record it read in p). A record's time is clamped into [since, until] of its
    partition, and a group is expired at the clock of the partition its records are in (or, for a
    group called only because its timeout fired, the earliest of them): a backlog is judged on the
    log's timeline, never on a wall clock that ran ahead of it. An absent partition: no bound on
    that side (Spark's Kafka connector, the first batch)."""

    since: Mapping[int, int] = field(default_factory=dict)
    until: Mapping[int, int] = field(default_factory=dict)
    resumed: int | None = None  # the log's outage floor (routeinfo/housekeeping.py); None: none known

    def receive_time(self, record_time_ms: int, partition: int, now_ms: int | None = None) -> int:
        """A record's time bounded by what the log says about when it arrived, never after now
        (None: not bounded by now; the source's read, before the step bounds it by its clock)."""
        until = self.until.get(partition)
        bounds = [b for b in (until, now_ms) if b is not None]
        upper = min(bounds) if bounds else None
        lower = self.since.get(partition)
        t = record_time_ms if upper is None else min(record_time_ms, upper)
        if lower is None:
            return t
        return max(t, lower if upper is None else min(lower, upper))

    def expiry_time(self, now_ms: int, partitions: Iterable[int] = ()) -> int:
        """The instant a group is expired at: its records' partitions' clock, else the earliest."""
        chosen = [self.until[p] for p in partitions if p in self.until] or list(self.until.values())
        return min([now_ms, *chosen])
