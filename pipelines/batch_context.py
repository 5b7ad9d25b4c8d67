"""What a micro-batch carries about itself, from the source that planned it to the step and the sink.

The source decides each batch's offsets and their log clock (`pipelines/offset_log.py`); the step
needs the clock and the outage floor to judge expiry, and the sink needs the offsets, the losses
and the phase times to record the batch. These travel in the batch as rows, never through files
beside it: Spark's checkpoint belongs to Spark, and a replayed batch carries the same context
because the source rebuilds it from the offsets Spark hands back.

- One context row per bucket key (`CONTEXT_PARTITION`), so every bucket is called in every batch
  and judges expiry by the batch's own clock; the row of bucket 0 asks the step to report the
  batch to the sink (`report`).
- A loss row (`LOSS_PARTITION`) for offsets a read found removed by the topic's retention after
  the batch was planned, addressed to bucket 0, which passes it on to the sink.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipelines.offset_log import LOG_CLOCK, RESUMED, LogClock, log_resets, lost_ranges, partition_offsets

CONTEXT_PARTITION = -2  # the `partition` of a batch's context row (one per bucket key)
LOSS_PARTITION = -3  # the `partition` of a read's loss row

Lost = list[tuple[int, int, int]]  # (partition, first, end): offsets first..end-1 the retention removed unread


@dataclass(frozen=True)
class BatchContext:
    """One batch as its source planned it: Kafka offsets from `start` to `end` (partition → next
    offset), the log clock per partition (`until`), the outage floor (`resumed`), the log resets
    counted so far (`resets`), the offsets its plan found gone (`lost`) and when its phases began
    (`times`: `trigger`, `admitted`, `planned`, epoch ms, as known)."""

    start: dict[str, int] = field(default_factory=dict)
    end: dict[str, int] = field(default_factory=dict)
    until: dict[int, int] = field(default_factory=dict)
    resumed: int | None = None
    resets: dict[str, int] = field(default_factory=dict)
    lost: dict[int, tuple[int, int]] = field(default_factory=dict)
    times: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def planned(start: Mapping[str, Any], end: Mapping[str, Any], times: Mapping[str, int]) -> BatchContext:
        """The context of the batch from the source offsets `start` to `end` (as Spark records them)."""
        clock = end.get(LOG_CLOCK)
        until = {int(p): int(t) for p, t in clock.items()} if isinstance(clock, dict) else {}
        resumed = end.get(RESUMED)
        admitted = {"admitted": max(until.values())} if until else {}
        return BatchContext(start=partition_offsets(dict(start)), end=partition_offsets(dict(end)), until=until,
                            resumed=int(resumed) if isinstance(resumed, (int, float)) else None,
                            resets=log_resets(end), lost=lost_ranges(end), times={**times, **admitted})

    def clock(self) -> LogClock:
        """The log clock the step judges this batch's records and expiries by (records arrive with
        their times already bounded by it: the source's `read`)."""
        return LogClock(until=self.until, resumed=self.resumed)

    def to_json(self, *, report: bool = False) -> bytes:
        return json.dumps({"start": self.start, "end": self.end, "until": self.until, "resumed": self.resumed,
                           "resets": self.resets, "lost": {str(p): list(r) for p, r in self.lost.items()},
                           "times": self.times, "report": report}, separators=(",", ":")).encode()

    @staticmethod
    def from_json(raw: bytes | str) -> tuple[BatchContext, bool]:
        """The context and whether its step call reports the batch to the sink."""
        d = json.loads(raw)
        return BatchContext(start={str(p): int(o) for p, o in d["start"].items()},
                            end={str(p): int(o) for p, o in d["end"].items()},
                            until={int(p): int(t) for p, t in d["until"].items()},
                            resumed=d["resumed"], resets={str(p): int(n) for p, n in d["resets"].items()},
                            lost={int(p): (int(r[0]), int(r[1])) for p, r in d["lost"].items()},
                            times={str(k): int(v) for k, v in d["times"].items()}), bool(d.get("report"))

    def losses(self, read: Lost) -> Lost:
        """What the batch found removed by the topic's retention before the job read it: what its
        plan named and what its reads found gone after the plan (`read`)."""
        return sorted({(p, first, end) for p, (first, end) in self.lost.items()} | set(read))

    def read_count(self, lost: Lost) -> int:
        """How many records the batch read from `start` (empty: the first batch) to `end`, less
        what was lost on the way. A partition whose log went back (a reset) counts none."""
        gone: dict[str, int] = {}
        for partition, first, stop in lost:
            gone[str(partition)] = gone.get(str(partition), 0) + stop - first
        total = 0
        for key, off in self.end.items():
            begin = self.start.get(key, off if self.start else 0)
            total += max(0, off - begin - gone.get(key, 0))
        return total


def loss_row_value(partition: int, first: int, end: int) -> bytes:
    """A loss row's value, `[partition, first, end]`: the step passes it on to the sink as it is
    (`step_rows.READ_LOSS`)."""
    return json.dumps([partition, first, end]).encode()
