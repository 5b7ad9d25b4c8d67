"""Table maintenance, run by the job between batches (it is the only writer).

Small files are compacted, checkpoints written, log entries and unreferenced files older
than the history window removed. The window (NAMESRV_HISTORY_RETENTION_MS, 7 days by
default) is what keeps time travel working; it is never taken below MIN_RETENTION_MS, so a
reader that has just picked a snapshot always finds its files.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from deltalake import DeltaTable

from schemas import tables as t

log = logging.getLogger(__name__)
MIN_RETENTION_MS = 10 * 60 * 1000


def retention_properties(retention_ms: int) -> dict[str, str]:
    """Delta table properties that make log cleanup and vacuum honour the history window."""
    hours = max(retention_ms, MIN_RETENTION_MS) / 3_600_000
    interval = f"interval {max(1, int(hours * 3600))} seconds"
    return {"delta.logRetentionDuration": interval, "delta.deletedFileRetentionDuration": interval}


@dataclass
class MaintenanceReport:
    started: float
    seconds: float = 0.0
    per_table: dict[str, dict[str, int]] = field(default_factory=dict)


def maintain(warehouse: str, retention_ms: int, tables: tuple[t.TableDef, ...] = t.ALL_TABLES) -> MaintenanceReport:
    report = MaintenanceReport(started=time.time())
    retention_hours = math.ceil(max(retention_ms, MIN_RETENTION_MS) / 3_600_000)
    for table in tables:
        path = f"{warehouse}/{table.name}"
        if not DeltaTable.is_deltatable(path):
            continue
        dt = DeltaTable(path)
        stats = {"filesBefore": len(dt.file_uris())}
        metrics = dt.optimize.compact()
        dt = DeltaTable(path)
        dt.create_checkpoint()
        dt.cleanup_metadata()
        removed = dt.vacuum(retention_hours=retention_hours, enforce_retention_duration=False, dry_run=False)
        stats.update(filesAfter=len(DeltaTable(path).file_uris()), compacted=int(metrics.get("numFilesRemoved", 0)),
                     vacuumed=len(removed))
        report.per_table[table.name] = stats
    report.seconds = time.time() - report.started
    return report


class MaintenanceSchedule:
    """Decides when the next run is due; `NAMESRV_MAINTENANCE_INTERVAL_MS` apart."""

    def __init__(self, interval_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_ms / 1000
        self.clock = clock
        self.last = clock()

    def due(self) -> bool:
        return bool(self.clock() - self.last >= self.interval_s)

    def done(self) -> None:
        self.last = self.clock()
