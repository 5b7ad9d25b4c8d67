"""A replica cut off from the store keeps answering from its last cut and says how stale it is
(snapshots/freshness.py, snapshots/store.py): /readyz turns 503 past NAMESRV_MAX_STALENESS_MS."""

from __future__ import annotations

import time

from routeinfo.snapshot import Snapshot
from snapshots.freshness import too_stale
from snapshots.reader import SnapshotReader
from snapshots.store import SnapshotStore


def test_a_replica_is_too_stale_only_past_the_bound():
    snap = Snapshot.empty()
    assert too_stale(snap, 29_999, 30_000) is None
    assert too_stale(snap, 30_000, 30_000) is None
    assert too_stale(snap, None, 30_000) is None  # never read: "no snapshot is served yet" says it
    assert too_stale(snap, 10**9, None) is None  # no bound
    reason = too_stale(snap, 45_000, 30_000)
    assert reason is not None and "45 s" in reason and "NAMESRV_MAX_STALENESS_MS" in reason


def test_the_store_reports_how_long_ago_it_read_the_store(tmp_path):
    store = SnapshotStore(SnapshotReader(tmp_path), 1.0, retention_ms=1000, max_staleness_ms=30_000)
    assert store.staleness_ms() is None
    store.refresh()  # an empty warehouse answers: nothing newer
    assert store.staleness_ms() is not None and store.staleness_ms() < 1000
    store.last_check = time.time() - 40  # as if the store had not answered for 40 s
    assert 39_000 <= store.staleness_ms() <= 41_000
    assert "no snapshot is served yet" in (store.not_ready() or "")  # the first reason still comes first
