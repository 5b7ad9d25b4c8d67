"""Batch admission: whether a trigger of the streaming query runs a micro-batch (pure).

The job turns Spark's no-data batches off (they would run at every trigger, because the
state step always has a timeout pending), so a batch runs only when the source returns
offsets that differ from the start. `decide` says when that should be:

- a record other than a heartbeat waits (registrations and writes are served without
  waiting for company);
- a full batch waits (`waiting_records` ≥ `full_batch`, the source's maxRecordsPerBatch): heartbeats
  have all the company a batch can take, so waiting longer only grows the backlog;
- the oldest waiting heartbeat has waited `defer_ms` (heartbeats keep a broker alive, they
  change nothing visible, so they may wait for company);
- the earliest group timeout the sink reported (`nextDeadline`) is due: an expiry or a
  broker_live flush (see `routeinfo/housekeeping.py` for the whole expiry path);
- records wait and `defer_ms` passed without a batch;
- nothing waits and `IDLE_BATCH_MS` passed without a batch: a safety net for a timeout the
  sink's deadline book cannot know (the book hears every group's timeout from the step and,
  after a restart, starts from broker_live; a chunked registration's abandonment after a
  restart is the one it misses). Each batch costs about a second of the JVM's CPU however
  little it does, so a net every `defer_ms` was most of an idle job's cost.

The first two run at once, even right after another batch: a change waits for nothing but the
batch in flight, and a backlog is read as fast as batches run. The others are paced: they run
no sooner than `pace_ms` (the trigger interval) after the previous batch. The query runs its
triggers back to back and the source's wait inside a trigger is what paces it (Spark would
otherwise hold a change that arrived during a batch until the next multiple of the interval).

With `defer_ms` = 0 a batch runs every `pace_ms`, as Spark's own no-data batches would. A
batch without new records bumps the virtual `tick` offset (`offsets_to_run`), which reads
nothing but lets Spark call the timed-out groups.

The inputs that need I/O (scanning the waiting records, reading `_progress.json`) come as
callables and are asked for only when the cheaper conditions did not decide already.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

TICK = "tick"  # the virtual offset key (not a Kafka partition)
IDLE_BATCH_MS = 300_000  # see the module docstring


@dataclass(frozen=True)
class Backlog:
    """What the records waiting to be read are: any of them urgent (not a heartbeat), and the
    record time of the oldest waiting heartbeat."""

    urgent: bool
    oldest_heartbeat_ms: int | None


def decide(now_ms: float, *, defer_ms: int, last_run_ms: float, pending: bool,
           backlog: Callable[[], Backlog], next_deadline: Callable[[], int | None],
           waiting_records: int = 0, full_batch: int | None = None, pace_ms: int = 0) -> bool:
    """True when this trigger should run a batch (see the module docstring for the rules)."""
    if full_batch is not None and waiting_records >= full_batch:
        return True
    since = now_ms - last_run_ms
    paced = since >= pace_ms
    if paced and (defer_ms <= 0 or since >= (defer_ms if pending else max(defer_ms, IDLE_BATCH_MS))):
        return True
    if pending:
        waiting = backlog()
        if waiting.urgent:
            return True
        if paced and waiting.oldest_heartbeat_ms is not None and now_ms - waiting.oldest_heartbeat_ms >= defer_ms:
            return True
    if not paced:
        return False
    deadline = next_deadline()
    return deadline is not None and now_ms >= deadline


def next_look_ms(now_ms: float, *, last_run_ms: float, pace_ms: int, deadline_ms: int | None, defer_ms: int = 0,
                 pending: bool = False, oldest_signal_ms: int | None = None) -> float:
    """The earliest time at which `decide` may say yes without a new record arriving (`pending`:
    records wait; `oldest_signal_ms`: the oldest waiting liveness signal's record time), so that a
    trigger may wait for records until then and lose nothing by it. Never before the pace allows
    a batch; at the latest the idle safety net. A record that arrives meanwhile may make it
    earlier: ask again."""
    if defer_ms <= 0:
        due = [last_run_ms]
    else:
        due = [last_run_ms + (defer_ms if pending else max(defer_ms, IDLE_BATCH_MS))]
        if pending and oldest_signal_ms is not None:
            due.append(oldest_signal_ms + defer_ms)
    if deadline_ms is not None:
        due.append(deadline_ms)
    return max(min(due), last_run_ms + pace_ms)


def is_partition(key: str) -> bool:
    """Whether an offsets key is a Kafka partition (not the tick or the log clock)."""
    return key.isdigit()


def pending_ranges(start: dict[str, int], end: dict[str, int]) -> dict[int, tuple[int, int]]:
    """Kafka partitions whose offsets would move: partition -> (start, end)."""
    return {int(p): (int(start.get(p, 0)), int(e)) for p, e in end.items()
            if is_partition(p) and int(e) != int(start.get(p, 0))}


def offsets_to_run(start: dict[str, int], end: dict[str, int], *, run: bool) -> dict[str, int]:
    """What `latestOffset` returns: `start` itself (no batch), or `end` with the tick carried
    over, bumped when no Kafka offset moves (a batch that only runs timeouts)."""
    if not run:
        return dict(start)
    tick = int(start.get(TICK, 0))
    out = {**end, TICK: tick}
    if not pending_ranges(start, end):
        out[TICK] = tick + 1
    return out
