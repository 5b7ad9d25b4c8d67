"""Cuts of the past (time travel) and the history reader's list and change queries.

Served from a reader of their own (its own table handles) and a small cache, so time-travel
requests never disturb the served cut's loads or each other.

The cache is bounded by what it holds, not only by how many cuts: a past cut of a 10,000 × 100
fleet is a million queue rows (an index of about 45 MB beside its brokers' rows), and sixteen of
them took a serving process past a GiB. It keeps past cuts while their queue rows stay within
`CACHED_ROWS` (a cut that shares the served cut's topics counts none), the newest loaded always;
and a load of a large cut gives its transient memory back afterwards (`conf.memory`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from conf.memory import release_memory
from conf.store import StorePath
from routeinfo.snapshot import Snapshot
from snapshots.reader import LockedReader, SnapshotReader

CACHED_CUTS = 16  # past cuts kept loaded, the oldest loaded dropped first,
CACHED_ROWS = 2_000_000  # while their queue rows (beside the served cut's) stay within this
RELEASE_AFTER_ROWS = 100_000  # a load of a cut with this many queue rows gives its peak back afterwards


class History:
    """Past cuts of `warehouse` within `retention_ms`; `served` is the cut served now (always
    readable, and whose topic index a past cut with the same topic_queue version reuses)."""

    def __init__(self, warehouse: StorePath, retention_ms: int, served: Callable[[], Snapshot]) -> None:
        self.retention_ms = retention_ms
        self._served = served
        self._reader = SnapshotReader(warehouse)
        self._lock = threading.Lock()
        self._cache: dict[int, tuple[Snapshot, int]] = {}  # snapshotId -> the cut, its queue rows of its own

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
            # after a warehouse restore, ids are committed again by other cuts: the commit time tells
            if cached is not None and cached[0].commit_time == row["commitTime"]:
                return cached[0]
            served = self._served()
            try:
                snap = self._reader.load(row, previous=served)
            except Exception as exc:  # files vacuumed or log entries cleaned up
                raise LookupError(f"snapshot {row['snapshotId']} can no longer be read ({type(exc).__name__}); "
                                  f"it is beyond the retained history") from None
            rows = 0 if snap.topics is served.topics else snap.topics.row_count()
            self._keep(row["snapshotId"], snap, rows)
            if rows >= RELEASE_AFTER_ROWS:
                release_memory(collect=False)  # the load's sorted copies, once dropped
            return snap

    def _keep(self, snapshot_id: int, snap: Snapshot, rows: int) -> None:
        """Cache `snap`, dropping the oldest loaded while over CACHED_CUTS or CACHED_ROWS."""
        self._cache[snapshot_id] = (snap, rows)
        while len(self._cache) > 1 and (len(self._cache) > CACHED_CUTS or
                                        sum(r for _, r in self._cache.values()) > CACHED_ROWS):
            self._cache.pop(next(iter(self._cache)))

    def cached(self) -> list[int]:
        """The ids of the past cuts held loaded, the oldest loaded first."""
        with self._lock:
            return list(self._cache)

    def reader(self) -> LockedReader:
        """The history reader, for list/change queries (serialized: its handles are stateful)."""
        return LockedReader(self._reader, self._lock)
