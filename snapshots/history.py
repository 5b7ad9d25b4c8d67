"""Cuts of the past (time travel) and the history reader's list and change queries.

Served from a reader of their own (its own table handles) and a small cache, so time-travel
requests never disturb the served cut's loads or each other.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from conf.store import StorePath
from routeinfo.snapshot import Snapshot
from snapshots.reader import LockedReader, SnapshotReader

CACHED_CUTS = 16  # past cuts kept loaded, the oldest loaded dropped first


class History:
    """Past cuts of `warehouse` within `retention_ms`; `served` is the cut served now (always
    readable, and whose topic index a past cut with the same topic_queue version reuses)."""

    def __init__(self, warehouse: StorePath, retention_ms: int, served: Callable[[], Snapshot]) -> None:
        self.retention_ms = retention_ms
        self._served = served
        self._reader = SnapshotReader(warehouse)
        self._lock = threading.Lock()
        self._cache: dict[int, Snapshot] = {}

    def cut(self, *, as_of_ms: int | None = None, snapshot_id: int | None = None) -> Snapshot:
        """The cut as of an instant or with an id; raises LookupError with a remark."""
        with self._lock:
            row = self._reader.row_at(as_of_ms=as_of_ms, snapshot_id=snapshot_id)
            if row is None:
                raise LookupError(f"no snapshot {snapshot_id}" if snapshot_id is not None else
                                  f"no snapshot was committed at or before {as_of_ms} (epoch ms)")
            if row["commitTime"] < time.time() * 1000 - self.retention_ms and row["snapshotId"] != self._served().snapshot_id:
                raise LookupError(f"snapshot {row['snapshotId']} is older than the history retention "
                                  f"({self.retention_ms // 3_600_000} h)")
            cached = self._cache.get(row["snapshotId"])
            if cached is not None:
                return cached
            try:
                snap = self._reader.load(row, previous=self._served())
            except Exception as exc:  # files vacuumed or log entries cleaned up
                raise LookupError(f"snapshot {row['snapshotId']} can no longer be read ({type(exc).__name__}); "
                                  f"it is beyond the retained history") from None
            if len(self._cache) >= CACHED_CUTS:
                self._cache.pop(next(iter(self._cache)))
            self._cache[row["snapshotId"]] = snap
            return snap

    def reader(self) -> LockedReader:
        """The history reader, for list/change queries (serialized: its handles are stateful)."""
        return LockedReader(self._reader, self._lock)
