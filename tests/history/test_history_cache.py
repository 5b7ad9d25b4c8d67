"""snapshots.history's cache of past cuts is bounded by the queue rows it holds, not only by how
many cuts: a real warehouse written by the real sink (no Spark), past cuts loaded from Delta."""

from __future__ import annotations

import time

from schemas import tables as t
from snapshots import history
from snapshots.history import History
from snapshots.reader import SnapshotReader
from snapshots.risk_history import snapshot_rows
from tests.delta_history import SinkDriver
from tests.helpers import DEFAULTS, hb, reg, topics


def test_past_cuts_are_kept_within_a_row_budget(tmp_path, monkeypatch):
    d = SinkDriver(tmp_path / "delta")
    now = int(time.time() * 1000)
    for k in range(5):  # each cut adds a group of 10 topics: 10, 20, 30, 40, 50 queue rows
        d.run_batch([reg(f"g{k}", 0, f"10.0.0.{k}:10911", tps=topics(*(f"T{k}-{i}" for i in range(10))))], now + k)
    d.run_batch([hb("g0", 0, "10.0.0.0:10911")], now + 10)  # the newest: heartbeats, the last cut's topic_queue
    rows = snapshot_rows(tmp_path / "delta")
    ids = [r["snapshotId"] for r in rows]
    served = SnapshotReader(tmp_path / "delta").load(rows[-1])
    monkeypatch.setattr(history, "CACHED_ROWS", 50)
    h = History(tmp_path / "delta", DEFAULTS.history_retention_ms, lambda: served)

    def ask(k: int) -> int:
        return h.cut(snapshot_id=ids[k]).topics.row_count()

    assert [ask(k) for k in range(4)] == [10, 20, 30, 40]
    assert h.cached() == [ids[3]]  # 30 + 40 > 50: dropped oldest first, down to the newest loaded
    assert ask(3) == 40 and h.cached() == [ids[3]]  # answered from the cache
    assert ask(0) == 10 and h.cached() == [ids[3], ids[0]]  # 40 + 10
    assert ask(1) == 20 and h.cached() == [ids[0], ids[1]]
    # the cut before the newest has the served cut's topic_queue version: it shares its topics, counting none
    assert rows[4][t.version_column(t.TOPIC_QUEUE)] == rows[-1][t.version_column(t.TOPIC_QUEUE)]
    assert h.cut(snapshot_id=ids[4]).topics is served.topics
    assert h.cached() == [ids[0], ids[1], ids[4]]


def test_a_cached_cut_is_not_answered_for_another_cut_with_its_id(tmp_path):
    """After a warehouse restore, ids are committed again by other cuts: a cached cut whose commit
    time is not the row's is loaded again, not answered."""
    import dataclasses

    d = SinkDriver(tmp_path / "delta")
    now = int(time.time() * 1000)
    d.run_batch([reg("g0", 0, "10.0.0.1:10911", tps=topics("A"))], now)
    d.run_batch([reg("g1", 0, "10.0.0.2:10911", tps=topics("B"))], now + 1)
    rows = snapshot_rows(tmp_path / "delta")
    served = SnapshotReader(tmp_path / "delta").load(rows[-1])
    h = History(tmp_path / "delta", DEFAULTS.history_retention_ms, lambda: served)
    first = h.cut(snapshot_id=rows[0]["snapshotId"])
    assert h.cut(snapshot_id=rows[0]["snapshotId"]) is first  # the cache answers the same cut
    stale = dataclasses.replace(first, commit_time=first.commit_time - 60_000)  # the pre-restore cut of that id
    h._cache[rows[0]["snapshotId"]] = (stale, 0)
    again = h.cut(snapshot_id=rows[0]["snapshotId"])
    assert again is not stale and again.commit_time == rows[0]["commitTime"]
