"""Timelines: where the time of one registration, one expiry, one restart and one start-up goes.

Each is a list of phases (name, start, end; epoch ms) between the bench's own instants (a
registration published, a job killed, a broker's timeout due, a change seen served) and the
instants the job records: its start-up phases in `_job.json` and the phases of the batch that
served the change in `_progress.json` (schemas/progress.py). The bench prints them and draws each
as a PNG into docs/ (`draw`); docs/latency.md reads them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

from bench.probes import registration
from bench.system import System
from pipelines import writer_lease
from schemas import events as ev
from schemas.progress import read_job_record, read_progress
from serving.fastpath import SNAPSHOT_HEADER

# A batch's phases in order: (the instant that ends it, its name).
BATCH = (("trigger", "trigger wait"), ("admitted", "source: offsets and admission"),
         ("planned", "offset log written, partitions asked"), ("sinkCalled", "batch planning"),
         ("stateDone", "source read, stateful stage, state commit"), ("tablesDone", "Delta commits (state tables)"),
         ("cutDone", "cut commit (snapshots row)"), ("time", "progress record"))
# A job's start-up phases in order (`_job.json`), then its query's start (`startedAt`).
START = (("process", "launcher starts the job"), ("main", "Python imports"), ("sessionBuilt", "JVM and SparkSession"),
         ("leaseTaken", "writer lease taken (tables fenced)"), ("startedAt", "query built"))
SERVED = "refresh and answer"


def phases(begin_ms: int, points: list[tuple[str, int | None]], served_ms: int) -> list[tuple[str, int, int]]:
    """Consecutive phases from `begin_ms` through the known points (unknown ones skipped; an instant
    before the previous one, such as a trigger that started before the change arrived, counts
    as no time) to `served_ms`."""
    out: list[tuple[str, int, int]] = []
    at = begin_ms
    for name, instant in [*points, (SERVED, served_ms)]:
        if instant is None:
            continue
        end = max(at, int(instant))
        out.append((name, at, end))
        at = end
    return out


def _batch_points(progress: dict[str, Any], started_ms: int | None = None) -> list[tuple[str, int | None]]:
    """A batch's phases. One planned before `started_ms` (the job instance's start) is a batch the
    previous instance planned and this one replays: its planning instants are the old instance's,
    so the time from the start to the sink is the query's start and the replay's planning."""
    p = {**progress.get("phases", {}), "time": progress.get("time")}
    points = [(name, p.get(key)) for key, name in BATCH]
    if started_ms is not None and (p.get("planned") or started_ms) < started_ms:
        return [("query start, Python source, planning of the replayed batch" if key == "sinkCalled" else name,
                 None if key in ("trigger", "admitted", "planned") else at) for (key, _), (name, at)
                in zip(BATCH, points, strict=True)]
    return points


def _start_points(job: dict[str, Any]) -> list[tuple[str, int | None]]:
    p = {**job.get("phases", {}), "startedAt": job.get("startedAt")}
    return [(name, p.get(key)) for key, name in START]


def _topics(topic: str) -> dict[str, Any]:
    """A topic table with `topic` and a second one (a registration of one topic is a chunk of a
    split registration, not a broker's whole registration)."""
    return {topic: ev.topic_config(topic), "TimelineBase": ev.topic_config("TimelineBase")}


def _now_ms() -> int:
    return int(time.time() * 1000)


def _wait_status(sys_: System, topic: str, status: int, timeout_s: float) -> tuple[int, int | None]:
    """When the route of `topic` was first answered with `status` (epoch ms), and from which cut."""
    deadline = time.monotonic() + timeout_s
    while True:
        r = sys_.http.get(f"{sys_.url}/topics/{topic}/route", timeout=10)
        if r.status_code == status:
            cut = r.headers.get(SNAPSHOT_HEADER)
            return _now_ms(), int(cut) if cut and cut.isdigit() else None
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}: HTTP {status} not seen within {timeout_s:.0f} s")
        time.sleep(0.005)


def _batch_of(sys_: System, cut: int | None) -> dict[str, Any]:
    """The progress record of the batch that wrote `cut`, if it is still the newest record (a
    later batch replaces it: then the timeline is measured again)."""
    progress = read_progress(sys_.cfg.warehouse) or {}
    if cut is None or progress.get("batchId") != cut or not progress.get("phases", {}).get("cutDone"):
        raise LookupError(f"the progress record is of batch {progress.get('batchId')}, not of cut {cut}")
    return progress


def registration_timeline(sys_: System, tries: int = 5) -> list[tuple[str, int, int]]:
    """A REGISTER_BROKER with a new topic, published → its route served."""
    for i in range(tries):
        time.sleep(0.37 * (i + 1))  # somewhere inside a trigger interval
        topic = f"TimelineTopic-{i}"
        begin = _now_ms()
        sys_.publish([registration(900 + i, 1, prefix="timeline", topic_prefix="TimelineTopic") | {
            "topicConfigTable": _topics(topic)}])
        acked = _now_ms()
        served, cut = _wait_status(sys_, topic, 200, 30)
        with contextlib.suppress(LookupError):
            return phases(begin, [("publish (Kafka ack)", acked), *_batch_points(_batch_of(sys_, cut))], served)
    raise RuntimeError(f"no registration's batch could be told apart in {tries} tries (later batches ran)")


def expiry_timeline(sys_: System, timeout_ms: int = 5000) -> list[tuple[str, int, int]]:
    """A broker registered with `heartbeatTimeoutMillis` = timeout_ms, then silent: its registration
    (its last sign of life) → its route gone (see `probes.expiry`)."""
    topic = "TimelineExpiry-0"
    last = _now_ms()
    sys_.publish([registration(950, 1, prefix="timeline-exp", topic_prefix="TimelineExpiry", timeout_ms=timeout_ms)
                  | {"topicConfigTable": _topics(topic)}])
    _wait_status(sys_, topic, 200, 30)
    gone, cut = _wait_status(sys_, topic, 404, timeout_ms / 1000 + 60)
    return phases(last, [("broker timeout", last + timeout_ms), *_batch_points(_batch_of(sys_, cut))], gone)


def restart_timeline(sys_: System) -> list[tuple[str, int, int]]:
    """SIGKILL the job that holds the lock; a registration published at once → its route served."""
    active = writer_lease.holder(sys_.cfg.store_root)
    assert active is not None, "no active job"
    begin = _now_ms()
    os.kill(active, signal.SIGKILL)
    topic = "TimelineRestart-0"
    sys_.publish([registration(960, 1, prefix="timeline-restart", topic_prefix="TimelineRestart") | {
        "topicConfigTable": _topics(topic)}])
    served, cut = _wait_status(sys_, topic, 200, 180)
    job = read_job_record(sys_.cfg.warehouse) or {}
    return phases(begin, [*_start_points(job), *_batch_points(_batch_of(sys_, cut), job.get("startedAt"))], served)


def startup_timeline(sys_: System, started_ms: int, ready_ms: int) -> list[tuple[str, int, int]]:
    """`./run.sh` (or the launcher) started → /readyz 200, from the job's records of its first batch."""
    job = read_job_record(sys_.cfg.warehouse) or {}
    progress = read_progress(sys_.cfg.warehouse) or {}
    return phases(started_ms, [("set-up checks, Kafka, launcher", (job.get("phases") or {}).get("process")),
                               *_start_points(job)[1:], *_batch_points(progress)], ready_ms)


def text(title: str, timeline: list[tuple[str, int, int]]) -> list[str]:
    """A Markdown table of one timeline: phase, ms, from the beginning."""
    begin = timeline[0][1] if timeline else 0
    rows = [f"**{title}**: {(timeline[-1][2] - begin) / 1000:.2f} s in all" if timeline else f"**{title}**: -", "",
            "| phase | ms | ends at ms |", "|---|---:|---:|"]
    rows += [f"| {name} | {end - start:,} | {end - begin:,} |" for name, start, end in timeline]
    return rows


def draw(title: str, timeline: list[tuple[str, int, int]], path: Path) -> None:
    """One horizontal bar per phase, on a common time axis (seconds from the beginning)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    begin = timeline[0][1]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(timeline) + 1.3))
    for row, (_name, start, end) in enumerate(timeline):
        width = (end - start) / 1000
        ax.barh(row, max(width, 0.004), left=(start - begin) / 1000, color=f"C{row % 10}")
        ax.text((end - begin) / 1000, row, f"  {end - start:,} ms", va="center", fontsize=8)
    ax.set_yticks(range(len(timeline)), [name for name, _, _ in timeline], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    total = (timeline[-1][2] - begin) / 1000
    ax.set_xlim(0, total * 1.18 + 0.01)
    ax.set_title(f"{title}: {total:.2f} s", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
