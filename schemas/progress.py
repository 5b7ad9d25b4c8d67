"""The job's records for readers, next to the tables in the warehouse.

`_progress.json`, written by the sink after every batch, read by the server to know which
offsets its served snapshot already reflects, and by the source to schedule timeouts:

{"batchId": int, "snapshotId": int | null (newest cut committed), "sourceOffsets": {"<p>": int},
 "time": epoch ms, "eventCount": int, "nextDeadline": epoch ms | null (earliest group timeout the
 job knows of; the Kafka source runs a batch for it even when no record arrived),
 "jobStartedAt": epoch ms (the start of the job instance that wrote it)}

`_job.json`, written when a job instance starts its query: {"startedAt": epoch ms}. A reader
compares the two: the job is running and has committed a batch since it started exactly when
`jobStartedAt` equals `startedAt` (what `/readyz` asks).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

PROGRESS_FILE = "_progress.json"
JOB_FILE = "_job.json"


def _write(warehouse: Path, name: str, record: dict[str, Any]) -> None:
    """Atomically replace a record (write a temporary file, then rename)."""
    tmp = Path(warehouse) / (name + ".tmp")
    tmp.write_text(json.dumps(record, sort_keys=True))
    os.replace(tmp, Path(warehouse) / name)


def _read(warehouse: Path, name: str) -> dict[str, Any] | None:
    try:
        record: dict[str, Any] = json.loads((Path(warehouse) / name).read_text())
    except FileNotFoundError:
        return None
    return record


def write_progress(warehouse: Path, progress: dict[str, Any]) -> None:
    _write(warehouse, PROGRESS_FILE, progress)


def read_progress(warehouse: Path) -> dict[str, Any] | None:
    return _read(warehouse, PROGRESS_FILE)


def write_job_start(warehouse: Path, started_ms: int) -> None:
    _write(warehouse, JOB_FILE, {"startedAt": started_ms})


def read_job_start(warehouse: Path) -> int | None:
    record = _read(warehouse, JOB_FILE)
    return None if record is None else int(record["startedAt"])


def covers(offsets: dict[str, int], coords: list[tuple[int, int]]) -> bool:
    """Whether consumed source `offsets` (partition -> next offset) include every (partition, offset)."""
    return all(int(offsets.get(str(p), -1)) > o for p, o in coords)
