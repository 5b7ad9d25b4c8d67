"""The job's progress record, `<warehouse>/_progress.json`: written by the sink after every
batch, read by the server to know which offsets its served snapshot already reflects.

{"batchId": int, "snapshotId": int | null (newest cut committed), "sourceOffsets": {"<p>": int},
 "time": epoch ms, "eventCount": int, "nextDeadline": epoch ms | null (earliest group timeout the
 job knows of; the Kafka source runs a batch for it even when no record arrived)}
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

PROGRESS_FILE = "_progress.json"


def write_progress(warehouse: Path, progress: dict[str, Any]) -> None:
    """Atomically replace the record (write a temporary file, then rename)."""
    tmp = Path(warehouse) / (PROGRESS_FILE + ".tmp")
    tmp.write_text(json.dumps(progress, sort_keys=True))
    os.replace(tmp, Path(warehouse) / PROGRESS_FILE)


def read_progress(warehouse: Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(warehouse) / PROGRESS_FILE).read_text())
    except FileNotFoundError:
        return None
