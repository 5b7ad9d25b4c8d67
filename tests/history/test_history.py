"""Issue 4: time travel, the change log, quiet-fleet materialization and table maintenance."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from schemas import events as ev
from schemas import tables as t
from snapshots.reader import SnapshotReader
from snapshots.store import SnapshotStore
from tests.delta_history import SinkDriver
from tests.harness import Pipeline
from tests.helpers import DEFAULTS, reg, topics

pytestmark = pytest.mark.integration


def open_newest(warehouse) -> float:
    """Seconds a fresh reader needs to find and load the newest cut (best of 11: the least noisy
    figure on a shared 2-core machine)."""
    times = []
    for _ in range(11):
        started = time.perf_counter()
        reader = SnapshotReader(warehouse)
        reader.load(reader.newest_row())
        times.append(time.perf_counter() - started)
    return min(times)


def commits_past_checkpoint(warehouse) -> dict[str, int]:
    """Per table, the commits a reader replays on top of the newest checkpoint: what opening a
    table costs, counted rather than timed, so the figure does not move with the machine's load."""
    replayed = {}
    for log in sorted(Path(warehouse).glob("*/_delta_log")):
        marker = log / "_last_checkpoint"
        base = json.loads(marker.read_text())["version"] if marker.exists() else -1
        replayed[log.parent.name] = sum(1 for f in log.glob("*.json") if int(f.stem) > base)
    return replayed


def test_quiet_fleet_stays_cheap_to_open_after_5000_batches_and_maintenance(tmp_path, figures):
    """A fleet that only heartbeats: broker_live is flushed once per window, the snapshot stays
    cheap to open, and every asOf inside the retention window answers after maintenance."""
    brokers, flush_ms, batch_ms = 50, 60_000, 1000
    d = SinkDriver(tmp_path / "delta", live_flush_ms=flush_ms)
    sink = d.sink
    t0 = int(time.time() * 1000) - 5000 * batch_ms  # history ends about now, inside the retention window

    def batch(b: int, kind: str) -> None:
        d.run_batch([reg(f"quiet-{g}", 0, f"127.0.0.1:{20000 + g}", tps=topics("Q1", "Q2")) if kind == "register"
                     else ev.heartbeat_event(cluster="DefaultCluster", broker_name=f"quiet-{g}", broker_id=0,
                                             addr=f"127.0.0.1:{20000 + g}") for g in range(brokers)],
                    t0 + b * batch_ms)

    batch(0, "register")
    for b in range(1, 50):
        batch(b, "heartbeat")
    raw_50 = open_newest(sink.warehouse)
    sink.maintain()  # maintenance adds checkpoints, so compare like with like
    batch(50, "heartbeat")
    at_50 = open_newest(sink.warehouse)
    replayed_50 = commits_past_checkpoint(sink.warehouse)
    versions_50 = DeltaTable(sink.path(t.BROKER_LIVE)).version()
    started = time.time()
    for b in range(51, 5000):
        batch(b, "heartbeat")
    loop_s = time.time() - started
    live_versions = DeltaTable(sink.path(t.BROKER_LIVE)).version() - versions_50
    before_maintenance = open_newest(sink.warehouse)
    replayed_before = commits_past_checkpoint(sink.warehouse)
    sink.maintain()
    batch(5000, "heartbeat")  # the next batch re-points the newest cut at the compacted versions
    at_5000 = open_newest(sink.warehouse)
    replayed_5000 = commits_past_checkpoint(sink.warehouse)
    figures(f"quiet fleet ({brokers} brokers, 1 s batches): broker_live versions over 4,950 batches = "
            f"{live_versions} (one per {flush_ms // 1000} s window; {3600 * live_versions // 4950} per hour vs "
            f"3600 per hour when every heartbeat is materialized)")
    figures(f"snapshot open time: {raw_50 * 1000:.1f} ms after 50 batches ({at_50 * 1000:.1f} ms after maintenance), "
            f"{before_maintenance * 1000:.1f} ms after 5,000 batches, {at_5000 * 1000:.1f} ms after maintenance "
            f"({loop_s:.1f} s to run the batches)")
    assert live_versions <= 4950 * batch_ms // flush_ms + 2
    # What opening costs, counted: after maintenance no table replays more commits than it did at
    # 50 batches (the batch after maintenance adds one to the tables it writes).
    assert set(replayed_5000) == set(replayed_50)
    assert sum(replayed_before.values()) > sum(replayed_5000.values()) + 50, replayed_before
    assert all(replayed_5000[name] <= replayed_50[name] + 1 for name in replayed_50), (replayed_50, replayed_5000)
    # The same, timed. Both figures are a few tens of ms on a shared 2-core box, where a run under
    # load measured 65 and 114 ms for equal work: the bound is twice the small history's time plus
    # 30 ms, still below what the 5,000 batches cost before maintenance (250-350 ms).
    assert at_5000 <= 2 * at_50 + 0.030

    store = SnapshotStore(SnapshotReader(sink.warehouse), 1.0, retention_ms=DEFAULTS.history_retention_ms)
    rows = DeltaTable(sink.path(t.SNAPSHOTS)).to_pyarrow_table().to_pylist()
    assert len(rows) > 50
    for row in rows:
        snap = store.historic(as_of_ms=row["commitTime"])
        assert len(snap.brokers) == brokers and snap.snapshot_id >= row["snapshotId"]


@pytest.fixture(scope="module")
def pipe(spark, kafka_bootstrap, tmp_path_factory):
    p = Pipeline(spark, kafka_bootstrap, tmp_path_factory.mktemp("history"),
                 NAMESRV_LIVE_FLUSH_MS="1000").start_job().start_http()
    yield p
    p.close()


def test_topology_story_time_travel_and_change_log(pipe):
    """Brokers join, a master switch, write perm wiped and re-added, a broker expires, a topic is
    deleted, a KV change; asOf each step answers exactly what was served at that step."""
    c, a0, a1, b0 = "StoryCluster", "127.0.0.1:25911", "127.0.0.1:25912", "127.0.0.1:25921"
    steps: list[tuple[str, int, dict]] = []

    def mark(label: str) -> None:
        time.sleep(0.05)
        moment = int(time.time() * 1000)
        time.sleep(0.05)
        steps.append((label, moment, {
            "route": pipe.get("/topics/StoryTopic/route"), "cluster": pipe.get("/cluster")[1],
            "kv": pipe.get("/kv/storyns")}))

    tps = topics("StoryTopic", "StoryBase")
    pipe.wait_served(pipe.publish([reg("story-a", 0, a0, tps=tps, cluster=c),
                                   reg("story-a", 1, a1, tps=tps, cluster=c)]))
    mark("joined")
    pipe.wait_served(pipe.publish([ev.unregister_broker_event(cluster=c, broker_name="story-a", broker_id=0, addr=a0),
                                   reg("story-a", 0, a1, tps=tps, cluster=c, counter=2)]))
    mark("master switched")
    assert pipe.write("POST", "/brokers/story-a/wipe-write-perm")[0] == 200
    mark("wiped")
    assert pipe.write("POST", "/brokers/story-a/add-write-perm")[0] == 200
    mark("re-added")
    pipe.wait_served(pipe.publish([reg("story-b", 0, b0, tps=tps, cluster=c, timeout_ms=3000)]))
    mark("b joined")
    pipe.wait_for(lambda: "story-b" not in pipe.get("/cluster")[1]["brokerAddrTable"], 30, "story-b to expire")
    mark("expired")
    assert pipe.write("DELETE", "/topics/StoryBase")[0] == 200
    mark("topic deleted")
    assert pipe.write("PUT", "/kv/storyns/k", {"value": "v1"})[0] == 200
    mark("kv put")

    for label, moment, seen in steps:
        assert pipe.get(f"/topics/StoryTopic/route?asOf={moment}") == seen["route"], label
        cluster = pipe.get(f"/cluster?asOf={moment}")[1]
        assert {k: v for k, v in cluster["brokerAddrTable"].items() if k.startswith("story")} == \
            {k: v for k, v in seen["cluster"]["brokerAddrTable"].items() if k.startswith("story")}, label
        assert pipe.get(f"/kv/storyns?asOf={moment}") == seen["kv"], label
    first = next(sn for sn in pipe.get("/history/snapshots?limit=1000")[1]["snapshots"]
                 if sn["commitTime"] <= steps[0][1])
    assert pipe.get(f"/topics/StoryTopic/route?snapshot={first['snapshotId']}") == steps[0][2]["route"]
    assert "StoryBase" in pipe.get(f"/topics?asOf={steps[0][1]}")[1]["topicList"]
    assert "StoryBase" not in pipe.get("/topics")[1]["topicList"]
    live_then = {r["brokerAddr"] for r in pipe.get(f"/brokers/live?asOf={steps[0][1]}")[1]}
    assert {a0, a1} <= live_then and a0 not in {r["brokerAddr"] for r in pipe.get("/brokers/live")[1]}
    assert pipe.get("/topics/StoryTopic/route?snapshot=999999")[1]["code"] == "SNAPSHOT_NOT_FOUND"
    assert pipe.get(f"/cluster?asOf={steps[0][1]}&snapshot=1")[0] == 400
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(steps[0][1] / 1000)) + f".{steps[0][1] % 1000:03d}Z"
    assert pipe.get(f"/topics/StoryTopic/route?asOf={iso}") == steps[0][2]["route"]
    assert pipe.get("/topics/StoryTopic/route?asOf=1000")[1]["code"] == "SNAPSHOT_NOT_FOUND"
    assert pipe.get("/topics/StoryTopic/route?asOf=yesterday")[0] == 400

    story = [r for r in _changes(pipe) if (r["brokerName"] or "").startswith("story") or r["namespace"] == "storyns"]
    kinds = [(r["kind"], r["brokerName"], r["brokerAddr"], r["topic"]) for r in story]
    expected = [
        ("CLUSTER_JOINED", "story-a", None, None), ("BROKER_REGISTERED", "story-a", a0, None),
        ("QUEUE_ADDED", "story-a", None, "StoryBase"), ("QUEUE_ADDED", "story-a", None, "StoryTopic"),
        ("BROKER_REGISTERED", "story-a", a1, None),
        ("BROKER_UNREGISTERED", "story-a", a0, None), ("ADDRESS_ID_CHANGED", "story-a", a1, None),
        ("MASTER_CHANGED", "story-a", a1, None),
        ("WRITE_PERM_WIPED", "story-a", None, "StoryBase"), ("WRITE_PERM_WIPED", "story-a", None, "StoryTopic"),
        ("WRITE_PERM_ADDED", "story-a", None, "StoryBase"), ("WRITE_PERM_ADDED", "story-a", None, "StoryTopic"),
        ("CLUSTER_JOINED", "story-b", None, None), ("BROKER_REGISTERED", "story-b", b0, None),
        ("QUEUE_ADDED", "story-b", None, "StoryBase"), ("QUEUE_ADDED", "story-b", None, "StoryTopic"),
        ("BROKER_EXPIRED", "story-b", b0, None), ("CLUSTER_LEFT", "story-b", None, None),
        ("QUEUE_REMOVED", "story-b", None, "StoryBase"), ("QUEUE_REMOVED", "story-b", None, "StoryTopic"),
        ("TOPIC_DELETED", "story-a", None, "StoryBase"),
        ("KV_PUT", None, None, None)]
    assert kinds == expected
    by_kind = {r["kind"]: r for r in story}
    assert by_kind["MASTER_CHANGED"]["after"] == a1 and by_kind["MASTER_CHANGED"]["before"] is None
    assert by_kind["ADDRESS_ID_CHANGED"]["before"] == 1
    wiped = next(r for r in story if r["kind"] == "WRITE_PERM_WIPED")
    assert wiped["before"]["perm"] == 6 and wiped["after"]["perm"] == 4
    assert by_kind["KV_PUT"]["after"] == "v1" and by_kind["KV_PUT"]["key"] == "k"
    assert by_kind["BROKER_UNREGISTERED"]["offset"] is not None and by_kind["BROKER_EXPIRED"]["offset"] is None

    b_joined = next(moment for label, moment, _ in steps if label == "b joined")
    diff = pipe.get(f"/history/diff?from={b_joined}&to={steps[-1][1]}")[1]
    assert "story-b" in diff["brokers"]["removed"] and "StoryBase" in diff["topics"]["removed"]
    assert diff["kv"]["added"] == {"storyns": {"k": "v1"}}
    whole = pipe.get(f"/history/diff?from={steps[0][1]}&to={steps[-1][1]}")[1]
    assert whole["brokers"]["changed"]["story-a"]["before"]["brokerAddrs"] == {"0": a0, "1": a1}
    assert whole["brokers"]["changed"]["story-a"]["after"]["brokerAddrs"] == {"0": a1}
    page = pipe.get("/history/snapshots?limit=2")[1]
    assert len(page["snapshots"]) == 2 and page["total"] >= 2 and "next" in page


def _changes(pipe) -> list[dict]:
    out, offset = [], 0
    while True:
        status, body = pipe.get(f"/history/changes?limit=1000&offset={offset}")
        assert status == 200
        out.extend(body["changes"])
        if "next" not in body:
            return out
        offset += 1000


def test_change_log_filters(pipe):
    pipe.wait_served(pipe.publish([reg("filter-a", 0, "127.0.0.1:26911", tps=topics("FilterTopic", "FilterBase"),
                                       cluster="FilterCluster")]))
    status, body = pipe.get("/history/changes?brokerName=filter-a&kind=QUEUE_ADDED")
    assert status == 200 and sorted(r["topic"] for r in body["changes"]) == ["FilterBase", "FilterTopic"]
    assert pipe.get("/history/changes?topic=FilterTopic&cluster=FilterCluster")[1]["total"] == 0  # queues carry no cluster
    assert pipe.get("/history/changes?cluster=FilterCluster")[1]["total"] == 2
    future = int(time.time() * 1000) + 3_600_000
    assert pipe.get(f"/history/changes?brokerName=filter-a&since={future}")[1]["total"] == 0
    assert pipe.get("/history/changes?limit=0")[0] == 400


def test_instants_beyond_the_retention_window_are_refused(tmp_path):
    d = SinkDriver(tmp_path / "delta")
    d.run_batch([reg("old-a", 0, "127.0.0.1:28911", tps=topics("OldTopic", "OldBase"))], int(time.time() * 1000))
    row = DeltaTable(str(tmp_path / "delta" / "snapshots")).to_pyarrow_table().to_pylist()[0]
    time.sleep(0.05)
    d.run_batch([ev.wipe_write_perm_event("old-a")], int(time.time() * 1000))
    store = SnapshotStore(SnapshotReader(tmp_path / "delta"), 1.0, retention_ms=20)
    store.refresh()
    with pytest.raises(LookupError, match="older than the history retention"):
        store.historic(as_of_ms=row["commitTime"])
    assert store.historic(as_of_ms=int(time.time() * 1000)).snapshot_id == store.current.snapshot_id
    with pytest.raises(LookupError, match="no snapshot was committed at or before"):
        store.historic(as_of_ms=row["commitTime"] - 1)


def test_the_refresher_reads_progress_first_and_still_finds_a_cut_progress_never_announced(tmp_path):
    """The store learns of a new cut from `_progress.json` at once; a cut committed by a job killed
    before it wrote its progress is still found by the periodic scan of `snapshots`."""
    d = SinkDriver(tmp_path / "delta")
    now = int(time.time() * 1000)
    d.run_batch([reg("ref-a", 0, "127.0.0.1:30001", tps=topics("RefA", "RefBase"))], now)
    store = SnapshotStore(SnapshotReader(d.sink.warehouse), 1.0, retention_ms=DEFAULTS.history_retention_ms)
    assert store.refresh() and "RefA" in store.current.topics
    d.run_batch([reg("ref-b", 0, "127.0.0.1:30002", tps=topics("RefB", "RefBase"))], now + 1000)
    assert store.refresh() and "RefB" in store.current.topics  # announced by progress: seen at once
    assert not store.refresh()

    def killed(point: str) -> None:
        if point == "before:progress":
            raise RuntimeError("killed before the progress record")

    d.sink.fault = killed
    cuts = DeltaTable(d.sink.path(t.SNAPSHOTS)).to_pyarrow_table().num_rows
    with pytest.raises(RuntimeError):
        d.run_batch([reg("ref-c", 0, "127.0.0.1:30003", tps=topics("RefC", "RefBase"))], now + 2000)
    assert DeltaTable(d.sink.path(t.SNAPSHOTS)).to_pyarrow_table().num_rows == cuts + 1  # the cut is committed
    assert not store.refresh() and "RefC" not in store.current.topics  # progress still names the old cut
    store.FULL_SCAN_S = 0.0
    assert store.refresh() and "RefC" in store.current.topics


def test_a_cut_that_changes_only_liveness_keeps_the_served_topic_index(tmp_path):
    """Most cuts of a quiet fleet rewrite only broker_live (the flush every window); loading one
    must not re-read topic_queue. A cut that does change topic_queue gets a new index, and time
    travel to an older topic_queue version loads that version, not the served one."""
    from tests.helpers import hb

    d = SinkDriver(tmp_path / "delta")  # live_flush_ms=0: every heartbeat rewrites broker_live
    now = int(time.time() * 1000)
    d.run_batch([reg("idx-a", 0, "127.0.0.1:30101", tps=topics("IdxA", "IdxBase"))], now)
    store = SnapshotStore(SnapshotReader(d.sink.warehouse), 1.0, retention_ms=DEFAULTS.history_retention_ms)
    assert store.refresh()
    first = store.current
    d.run_batch([hb("idx-a", 0, "127.0.0.1:30101")], now + 1000)
    assert store.refresh() and store.current.snapshot_id != first.snapshot_id
    assert store.current.versions[t.BROKER_LIVE.name] > first.versions[t.BROKER_LIVE.name]
    assert store.current.topics is first.topics  # same topic_queue version: the index carried over
    assert store.current.live[0]["lastUpdateTimestamp"] > first.live[0]["lastUpdateTimestamp"]

    d.run_batch([reg("idx-b", 0, "127.0.0.1:30102", tps=topics("IdxB", "IdxBase"))], now + 2000)
    assert store.refresh() and store.current.topics is not first.topics
    assert "IdxB" in store.current.topics and [q["brokerName"] for q in store.current.topics["IdxBase"]] == ["idx-a", "idx-b"]
    old = store.historic(snapshot_id=first.snapshot_id)
    assert "IdxB" not in old.topics and [q["brokerName"] for q in old.topics["IdxBase"]] == ["idx-a"]
