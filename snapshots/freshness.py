"""Whether the served cut is fresh enough to answer from, told from the cut and the job's records
(schemas.progress): readiness (a served cut, and a batch committed by the job instance that runs
now), read-your-writes (the source offsets a cut reflects), and whether the host's cut builder is
why the served cut is behind (its status, `BuilderStatus`). Pure; the store (`snapshots.store`)
holds the cut and the records, and waits for a newer cut when asked to.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
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


# The host's cut builder's status (`snapshots.cutbuilder` writes it beside the cut file, the serving
# stores read it): what lets a serving process say that the builder is the broken part, and why.
STATUS_FILE = "builder.json"


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


@dataclass(frozen=True)
class BuilderFailure:
    """The builder's failures since its last success: the first one's time, the last one's time
    and message, and how many in a row."""

    since_ms: int
    at_ms: int
    message: str
    count: int


@dataclass(frozen=True)
class BuilderStatus:
    """What the host's cut builder last said of itself: who it is (pid, and the process's start
    time in clock ticks, which tells a reused pid from it), the last cut it wrote, and its failures
    since (None: its last attempt succeeded)."""

    pid: int
    process_start: int | None
    started_ms: int
    updated_ms: int
    written_id: int | None = None
    written_ms: int | None = None
    failure: BuilderFailure | None = None

    def restarted(self, pid: int, process_start: int | None, now_ms: int) -> BuilderStatus:
        """This status taken over by a new builder process: its last cut and its failures carry on
        (a builder that dies of its failure and is restarted keeps counting them)."""
        return replace(self, pid=pid, process_start=process_start, started_ms=now_ms, updated_ms=now_ms)

    def succeeded(self, snapshot_id: int | None, now_ms: int, *, wrote: bool) -> BuilderStatus:
        """After an attempt that left the file holding the newest cut (`wrote`: by writing it now)."""
        if wrote:
            return replace(self, updated_ms=now_ms, written_id=snapshot_id, written_ms=now_ms, failure=None)
        return replace(self, updated_ms=now_ms, failure=None)

    def failed(self, message: str, now_ms: int) -> BuilderStatus:
        before = self.failure
        failure = BuilderFailure(now_ms if before is None else before.since_ms, now_ms, message,
                                 1 if before is None else before.count + 1)
        return replace(self, updated_ms=now_ms, failure=failure)

    def to_json(self) -> dict[str, Any]:
        f = self.failure
        return {"pid": self.pid, "processStart": self.process_start, "startedAt": self.started_ms,
                "updatedAt": self.updated_ms, "lastCut": {"snapshotId": self.written_id, "writtenAt": self.written_ms},
                "failure": None if f is None else {"since": f.since_ms, "at": f.at_ms, "message": f.message,
                                                   "consecutive": f.count}}

    @classmethod
    def from_json(cls, doc: Any) -> BuilderStatus:
        """Raises ValueError (or KeyError, TypeError) when `doc` is not a status."""
        f, cut = doc["failure"], doc["lastCut"]
        return cls(int(doc["pid"]), None if doc["processStart"] is None else int(doc["processStart"]),
                   int(doc["startedAt"]), int(doc["updatedAt"]),
                   None if cut["snapshotId"] is None else int(cut["snapshotId"]),
                   None if cut["writtenAt"] is None else int(cut["writtenAt"]),
                   None if f is None else BuilderFailure(int(f["since"]), int(f["at"]), str(f["message"]),
                                                         int(f["consecutive"])))


def builder_trouble(status: BuilderStatus, alive: bool) -> str | None:
    """What is wrong with the host's cut builder by its status (None: nothing: it runs, and its last
    attempt succeeded); `alive`: whether its pid is still that process."""
    f = status.failure
    failed = None if f is None else \
        f"failed {f.count} time{'s' if f.count != 1 else ''} since {_utc(f.since_ms)}: {f.message}"
    if not alive:
        return (f"the cut builder is not running (last seen pid {status.pid} at {_utc(status.updated_ms)})"
                + ("" if failed is None else f"; it had {failed}"))
    return None if failed is None else f"the host's cut builder (pid {status.pid}) has {failed}"


def builder_behind(status: BuilderStatus | None, alive: bool, served: int | None, newest: int | None) -> str | None:
    """Why a server whose served cut `served` is behind the job's newest committed cut `newest`
    should not take traffic, when the builder is why (None: it is not behind, or the builder runs
    and has not failed since its last success: the file is on its way). A failure long past, with
    the served cut current, says nothing."""
    if status is None or newest is None or (served is not None and served >= newest):
        return None
    trouble = builder_trouble(status, alive)
    if trouble is None:
        return None
    return f"{trouble}; serving {'no cut' if served is None else f'cut {served}'} while the job committed {newest}"
