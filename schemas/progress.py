"""The job's records for readers, next to the tables in the warehouse.

`_progress.json`, written by the sink after every batch, read by the server to know which
offsets its served snapshot already reflects, and by the source to schedule timeouts:

{"batchId": int, "snapshotId": int | null (newest cut committed), "sourceOffsets": {"<p>": int},
 "resets": {"<p>": int} (how many times the partition's log went back under the job: a wiped or
 recreated log, read again from its start; a write whose offset the job already claimed is served
 once the count grew, `snapshots.freshness.LogMark`),
 "time": epoch ms, "eventCount": int, "nextDeadline": epoch ms | null (earliest group timeout the
 job knows of; the Kafka source runs a batch for it even when no record arrived),
 "jobStartedAt": epoch ms (the start of the job instance that wrote it),
 "phases": {name: epoch ms} (when this batch's phases ended: `trigger` (Spark started the trigger),
 `admitted` (the source decided to run it), `planned` (its offsets logged, Spark asked the source for
 its partitions), `sinkCalled`, `stateDone`
 (source read, stateful stage and state commit done), `tablesDone`, `cutDone` (the `snapshots` row;
 absent when the batch wrote no cut); `time` is the last phase. For timelines (docs/latency.md)},
 "cut": {...} (the `snapshots` row of `snapshotId`, once this job instance committed a cut: a reader
 loads the newest cut without scanning the `snapshots` table)}

`_job.json`, written when a job instance starts its query: {"startedAt": epoch ms, "phases":
{name: epoch ms}} (`process` started, `main` entered (imports done), `sessionBuilt`, `leaseTaken`;
`startedAt` is when the query started being built). A reader
compares the two: the job is running and has committed a batch since it started exactly when
`jobStartedAt` equals `startedAt` (what `/readyz` asks).
"""

from __future__ import annotations

import json
from typing import Any

from conf.store import StorePath, replace_text, store_path

PROGRESS_FILE = "_progress.json"
JOB_FILE = "_job.json"


def _write(warehouse: StorePath, name: str, record: dict[str, Any]) -> None:
    replace_text(store_path(warehouse) / name, json.dumps(record, sort_keys=True))


def _read(warehouse: StorePath, name: str) -> dict[str, Any] | None:
    try:
        record: dict[str, Any] = json.loads((store_path(warehouse) / name).read_text())
    except FileNotFoundError:
        return None
    return record


def write_progress(warehouse: StorePath, progress: dict[str, Any]) -> None:
    _write(warehouse, PROGRESS_FILE, progress)


def read_progress(warehouse: StorePath) -> dict[str, Any] | None:
    return _read(warehouse, PROGRESS_FILE)


def write_job_start(warehouse: StorePath, started_ms: int, phases: dict[str, int] | None = None) -> None:
    _write(warehouse, JOB_FILE, {"startedAt": started_ms, "phases": phases or {}})


def read_job_record(warehouse: StorePath) -> dict[str, Any] | None:
    return _read(warehouse, JOB_FILE)


def read_job_start(warehouse: StorePath) -> int | None:
    record = _read(warehouse, JOB_FILE)
    return None if record is None else int(record["startedAt"])


def covers(offsets: dict[str, int], coords: list[tuple[int, int]]) -> bool:
    """Whether consumed source `offsets` (partition -> next offset) include every (partition, offset)."""
    return all(int(offsets.get(str(p), -1)) > o for p, o in coords)
