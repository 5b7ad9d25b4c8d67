"""Whether the served cut is fresh enough to answer from, told from the cut and the job's records
(schemas.progress): readiness (a served cut, and a batch committed by the job instance that runs
now) and read-your-writes (the source offsets a cut reflects). Pure; the store
(`snapshots.store`) holds the cut and the records, and waits for a newer cut when asked to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from routeinfo.snapshot import Snapshot
from schemas.progress import covers


@dataclass(frozen=True)
class LogMark:
    """A position in the log: source offsets, and how many times each partition's log went back
    under the job (None: not known; a cut's own row does not record it).

    Taken just before a write is published (from the newest progress record): a record is
    appended at its log's end, which is at or past anything the job read from that log, so a
    published offset below the mark's is in a log that went back under the job (a wiped or
    recreated log), and the job's offsets for that partition say nothing about it until the job
    has counted one more reset there."""

    offsets: dict[str, int]
    resets: dict[str, int] | None


def log_mark(progress: dict[str, Any] | None) -> LogMark:
    if progress is None:
        return LogMark({}, {})
    return LogMark({str(k): int(v) for k, v in progress["sourceOffsets"].items()},
                   {str(k): int(v) for k, v in (progress.get("resets") or {}).items()})


def served_mark(snap: Snapshot, progress: dict[str, Any] | None) -> LogMark:
    """Where in the log the served cut `snap` stands.

    The job writes a snapshot only when something changed and records every batch's
    progress; if the served snapshot is the newest one that progress knows of, everything up
    to the progress offsets is included (the batches after it changed nothing).
    """
    if progress is not None and progress.get("snapshotId") == snap.snapshot_id:
        return log_mark(progress)
    return LogMark(snap.source_offsets, None)


def served_offsets(snap: Snapshot, progress: dict[str, Any] | None) -> dict[str, int]:
    """Source offsets whose events the served snapshot `snap` reflects (`served_mark`)."""
    return served_mark(snap, progress).offsets


def includes(served: LogMark, coords: list[tuple[int, int]], mark: LogMark | None = None) -> bool:
    """Whether a cut standing at `served` (`served_mark`) includes the events published at `coords`
    (`mark`: where the job stood just before they were published; without it, offsets alone)."""
    if not covers(served.offsets, coords):
        return False
    gone = {str(p) for p, o in coords if mark is not None and o < mark.offsets.get(str(p), -1)}
    if not gone:
        return True
    if served.resets is None or mark is None or mark.resets is None:
        return False
    resets, before = served.resets, mark.resets
    return all(resets.get(p, 0) > before.get(p, 0) for p in gone)


def reset_since(then: LogMark | None, now: LogMark, partition: int) -> bool:
    """Whether the job counted a reset of `partition`'s log between `then` (a mark taken before a
    publish) and `now`: offsets published before it name other records since."""
    if then is None or then.resets is None or now.resets is None:
        return False
    return now.resets.get(str(partition), 0) > then.resets.get(str(partition), 0)


def too_stale(snap: Snapshot, staleness_ms: int | None, max_staleness_ms: int | None) -> str | None:
    """Why a replica that has not read the store for `staleness_ms` should not take traffic (None:
    it may): it still answers from `snap`, but a load balancer should prefer a replica that reads."""
    if max_staleness_ms is None or staleness_ms is None or staleness_ms <= max_staleness_ms:
        return None
    return (f"the store has not been read for {staleness_ms / 1000:.0f} s (NAMESRV_MAX_STALENESS_MS is "
            f"{max_staleness_ms / 1000:.0f} s): answers come from cut {snap.snapshot_id}, the newest one seen then")


def not_ready(snap: Snapshot, progress: dict[str, Any] | None, job_started: int | None) -> str | None:
    """Why a server serving `snap` should not take traffic yet (None: ready): it needs a served cut,
    and the job instance that runs now (started at `job_started`) must have committed a batch
    since it started, so that a registration published now is served within a batch or two."""
    if snap.snapshot_id is None:
        return "no snapshot is served yet: the streaming job has not committed its first cut"
    if job_started is None:
        return "the streaming job has not started"
    if progress is None or progress.get("jobStartedAt") != job_started:
        return "the streaming job has started but not committed a batch yet"
    return None
