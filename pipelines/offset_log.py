"""Spark's offset log (`<checkpoint>/offsets/<batchId>`): what a micro-batch read, and its log clock.

Spark writes a batch's end offsets before the batch runs and reads the same file when it
replays the batch after a crash, so anything derived from it is the same on every run of that
batch. The sink reads the Kafka offsets from it; the state step reads the log clock that our
source puts next to them (`LOG_CLOCK`, see `pipelines/kafka_source.py`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from conf.store import StorePath

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


def read_source_offsets(path: StorePath) -> dict[str, Any]:
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


def batch_times(path: StorePath, raw: dict[str, Any]) -> dict[str, int]:
    """When a batch was triggered (`trigger`: Spark's batchTimestampMs), admitted (`admitted`: the
    newest of our source's log clock, taken when it decided to run the batch) and planned
    (`planned`: the offset log written), epoch ms; what is not known is left out. For the
    timelines (docs/latency.md): each is a phase boundary of one batch."""
    times: dict[str, int] = {}
    try:
        lines = path.read_text().splitlines()
        times["planned"] = int(path.stat().st_mtime * 1000)
    except FileNotFoundError:
        return times
    if len(lines) > 1:
        try:
            times["trigger"] = int(json.loads(lines[1])["batchTimestampMs"])
        except (ValueError, KeyError, TypeError):
            pass
    clock = raw.get(LOG_CLOCK)
    if isinstance(clock, dict) and clock:
        times["admitted"] = max(int(v) for v in clock.values())
    return times


def log_resets(raw: Mapping[str, Any]) -> dict[str, int]:
    """Partition -> how many times its log went back under the job (`RESETS`; none: empty)."""
    resets = raw.get(RESETS)
    return {str(p): int(n) for p, n in resets.items()} if isinstance(resets, dict) else {}


READ_LOSSES = "_read_losses"  # beside the progress record: what batches' reads found removed after their plan


def task_batch_id() -> int | None:
    """The micro-batch the calling Spark task belongs to (Spark sets it as a local property of
    the batch's tasks); None outside one."""
    from pyspark import TaskContext
    ctx = TaskContext.get()
    raw = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
    return None if raw is None else int(raw)


def note_read_loss(progress_dir: StorePath, batch_id: int, partition: int, first: int, end: int) -> None:
    """A batch's read found offsets first..end-1 removed by the retention after the batch was
    planned: noted for the batch's sink (`read_losses`), which names them with the plan's `LOST`.
    A replay of the batch notes them again, under the same name."""
    folder = progress_dir / READ_LOSSES
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{batch_id}-{partition}-{first}.json").write_text(
        json.dumps({"partition": partition, "first": first, "end": end}))


def read_losses(progress_dir: StorePath, batch_id: int) -> list[tuple[int, int, int]]:
    """(partition, first, end) of what batch `batch_id`'s reads noted (`note_read_loss`)."""
    folder = progress_dir / READ_LOSSES
    if not folder.exists():
        return []
    found = []
    for path in folder.iterdir():
        if path.name.startswith(f"{batch_id}-"):
            note = json.loads(path.read_text())
            found.append((int(note["partition"]), int(note["first"]), int(note["end"])))
    return sorted(found)


def forget_read_losses(progress_dir: StorePath, upto_batch: int) -> None:
    """Remove the notes of batches up to `upto_batch` (their sinks have named them)."""
    folder = progress_dir / READ_LOSSES
    if not folder.exists():
        return
    for path in folder.iterdir():
        head = path.name.split("-", 1)[0]
        if head.isdigit() and int(head) <= upto_batch:
            path.unlink(missing_ok=True)


def lost_ranges(raw: Mapping[str, Any]) -> dict[int, tuple[int, int]]:
    """Partition -> (first, end) of the offsets a batch found gone from the log (`LOST`; none: empty)."""
    lost = raw.get(LOST)
    return {int(p): (int(r[0]), int(r[1])) for p, r in lost.items()} if isinstance(lost, dict) else {}


def partition_offsets(raw: dict[str, Any]) -> dict[str, int]:
    """Kafka partition -> next offset, from either source's offsets."""
    offsets: dict[str, int] = {}
    for key, value in raw.items():
        if key in (LOG_CLOCK, RESETS, LOST):  # our per-partition entries, not the connector's per-topic offsets
            continue
        if isinstance(value, dict):  # the connector's {"<topic>": {"<partition>": offset}}
            offsets.update({str(p): int(o) for p, o in value.items()})
        elif str(key).isdigit():  # Kafka partitions, not "tick" or "clock"
            offsets[str(key)] = int(value)
    return offsets


def read_offset_log(path: StorePath) -> dict[str, int]:
    return partition_offsets(read_source_offsets(path))


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

    def receive_time(self, record_time_ms: int, partition: int, now_ms: int) -> int:
        """A record's time bounded by what the log says about when it arrived, never after now."""
        upper = min(self.until.get(partition, now_ms), now_ms)
        lower = self.since.get(partition)
        t = min(record_time_ms, upper)
        return t if lower is None else max(t, min(lower, upper))

    def expiry_time(self, now_ms: int, partitions: Iterable[int] = ()) -> int:
        """The instant a group is expired at: its records' partitions' clock, else the earliest."""
        chosen = [self.until[p] for p in partitions if p in self.until] or list(self.until.values())
        return min([now_ms, *chosen])


def _per_partition(raw: Any) -> dict[int, int]:
    if isinstance(raw, dict):
        return {int(p): int(t) for p, t in raw.items()}
    return {}


class BatchClocks:
    """The log clock of a batch, read from the offset log once per batch per process."""

    def __init__(self, checkpoint_dir: StorePath) -> None:
        self._offsets = checkpoint_dir / "offsets"
        self._cached: tuple[int, LogClock] | None = None

    def clock(self, batch_id: int | None) -> LogClock:
        if batch_id is None:
            return LogClock()
        if self._cached is None or self._cached[0] != batch_id:
            raw = read_source_offsets(self._offsets / str(batch_id))
            until = _per_partition(raw.get(LOG_CLOCK))
            since = _per_partition(read_source_offsets(self._offsets / str(batch_id - 1)).get(LOG_CLOCK)) \
                if batch_id > 0 else {}
            resumed = raw.get(RESUMED)
            self._cached = (batch_id, LogClock(since=since, until=until,
                                               resumed=int(resumed) if isinstance(resumed, (int, float)) else None))
        return self._cached[1]
