"""Restarting the job on the same checkpoint: routes kept, no duplicate rows, silent brokers expired."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from deltalake import DeltaTable

from schemas import tables as t
from tests.harness import Pipeline
from tests.helpers import DEFAULTS, hb, reg, routing_config, topics, unreg

pytestmark = pytest.mark.integration

KEYS = {
    t.TOPIC_QUEUE.name: ("topic", "brokerName"),
    t.BROKER_ADDR.name: ("brokerName", "brokerId"),
    t.CLUSTER_ADDR.name: ("clusterName", "brokerName"),
    t.BROKER_LIVE.name: ("clusterName", "brokerAddr", "brokerName"),
    t.FILTER_SERVER.name: ("clusterName", "brokerAddr", "brokerName"),
    t.KV_CONFIG.name: ("namespace", "key"),
}


def test_restart_keeps_routes_without_duplicates_and_expires_the_silent(spark, source, source_bootstrap, tmp_path):
    p = Pipeline(spark, source_bootstrap, tmp_path, NAMESRV_KAFKA_SOURCE=source).start_job().start_http()
    try:
        stay, silent = "127.0.0.1:17911", "127.0.0.1:17921"
        p.wait_served(p.publish([
            reg("broker-stay", 0, stay, tps=topics("StayTopic", "Base"), timeout_ms=60_000),
            reg("broker-silent", 0, silent, tps=topics("SilentTopic", "Base"), timeout_ms=8_000)]))
        assert p.get("/topics/SilentTopic/route")[0] == 200
        snapshots_before = len(DeltaTable(str(p.cfg.warehouse / "snapshots")).to_pyarrow_table())
        p.stop_job()
        stopped = time.time()

        # While the job is down, only broker-stay keeps heartbeating; the server keeps answering.
        while time.time() - stopped < 9:
            p.publish([hb("broker-stay", 0, stay)])
            assert p.get("/topics/SilentTopic/route")[0] == 200
            time.sleep(1)

        p.start_job()
        p.wait_for(lambda: p.get("/topics/SilentTopic/route")[0] == 404, 60, "broker-silent to expire on restart")
        status, body = p.get("/topics/StayTopic/route")
        assert status == 200 and body["brokerDatas"][0]["brokerAddrs"] == {"0": stay}
        assert len(DeltaTable(str(p.cfg.warehouse / "snapshots")).to_pyarrow_table()) > snapshots_before

        for table, key in KEYS.items():
            rows = DeltaTable(str(p.cfg.warehouse / table)).to_pyarrow_table().to_pylist()
            dupes = [k for k, n in Counter(tuple(r[c] for c in key) for r in rows).items() if n > 1]
            assert not dupes, f"{table} has duplicate rows for {dupes}"
        live = DeltaTable(str(p.cfg.warehouse / "broker_live")).to_pyarrow_table().to_pylist()
        assert [r["brokerName"] for r in live] == ["broker-stay"]
    finally:
        p.close()


def test_a_checkpoint_of_another_bucket_count_is_moved_not_lost(spark, kafka_bootstrap, tmp_path, caplog):
    """The state of every group crosses to the new buckets: a later UNREGISTER still finds its
    broker (an empty state would leave the rows in place), and a silent broker still expires."""
    import logging

    from pipelines import state_layout
    p = Pipeline(spark, kafka_bootstrap, tmp_path, NAMESRV_STATE_BUCKETS="2").start_job().start_http()
    try:
        stay, silent = "127.0.0.1:17931", "127.0.0.1:17941"
        others = [reg(f"broker-m{i}", 0, f"127.0.0.1:{17950 + i}", tps=topics(f"MovedTopic{i}", "Base"), timeout_ms=60_000)
                  for i in range(6)]
        p.wait_served(p.publish([
            reg("broker-stay", 0, stay, tps=topics("StayTopic", "Base"), timeout_ms=60_000),
            reg("broker-silent", 0, silent, tps=topics("SilentTopic", "Base"), timeout_ms=8_000), *others]))
        assert state_layout.recorded_buckets(p.cfg.checkpoint_dir) == 2
        p.stop_job()

        p.cfg = p.config_with(NAMESRV_STATE_BUCKETS="5")
        with caplog.at_level(logging.WARNING, logger="pipelines.state_layout"):
            p.start_job()
        assert any(("under 2 buckets balanced over 2 tasks, this job under 5 buckets balanced over 2 tasks: "
                    "moving 8 broker group(s)") in r.getMessage()
                   for r in caplog.records), [r.getMessage() for r in caplog.records]
        p.wait_served(p.publish([hb("broker-stay", 0, stay)]))
        p.wait_for(lambda: p.get("/topics/SilentTopic/route")[0] == 404, 60, "broker-silent to expire")
        assert p.get("/topics/StayTopic/route")[0] == 200
        p.wait_served(p.publish([unreg("broker-m3", 0, "127.0.0.1:17953")]))
        assert p.get("/topics/MovedTopic3/route")[0] == 404
        assert all(p.get(f"/topics/MovedTopic{i}/route")[0] == 200 for i in (0, 1, 2, 4, 5))
        # Recorded once Spark committed the move's batch, which it does when it plans a later one
        # (the batches above): until then a restart would move the state again (`prepare`).
        p.wait_for(lambda: state_layout.recorded_buckets(p.cfg.checkpoint_dir) == 5, 60, "the new layout recorded")
        p.check_job()
    finally:
        p.close()


def test_a_batch_planned_under_the_old_layout_and_not_committed_carries_the_move(spark, kafka_bootstrap, tmp_path,
                                                                                   caplog):
    """Spark replays an uncommitted batch before planning another: that batch hands the state
    over first, so its records apply to the moved state, not to empty buckets."""
    import logging

    from pipelines import state_layout
    p = Pipeline(spark, kafka_bootstrap, tmp_path, NAMESRV_STATE_BUCKETS="2").start_job().start_http()
    try:
        p.wait_served(p.publish([reg(f"broker-u{i}", 0, f"127.0.0.1:{17970 + i}", tps=topics(f"UTopic{i}", "Base"),
                                     timeout_ms=60_000) for i in range(4)]))
        p.wait_served(p.publish([unreg("broker-u1", 0, "127.0.0.1:17971")]))
        p.stop_job()
        commits = p.cfg.checkpoint_dir / "commits"
        last = max(int(f.name) for f in commits.iterdir() if f.name.isdigit())
        (commits / str(last)).unlink()  # the unregistration's batch: planned, not committed
        (commits / f".{last}.crc").unlink(missing_ok=True)

        p.cfg = p.config_with(NAMESRV_STATE_BUCKETS="5")
        with caplog.at_level(logging.WARNING, logger="pipelines.state_layout"):
            p.start_job()
        assert any(("under 2 buckets balanced over 2 tasks, this job under 5 buckets balanced over 2 tasks: "
                    "moving 4 broker group(s)") in r.getMessage()
                   for r in caplog.records), [r.getMessage() for r in caplog.records]
        p.wait_for(lambda: state_layout.recorded_buckets(p.cfg.checkpoint_dir) == 5, 60, "the new layout recorded")
        assert p.get("/topics/UTopic1/route")[0] == 404
        assert all(p.get(f"/topics/UTopic{i}/route")[0] == 200 for i in (0, 2, 3))
        p.wait_served(p.publish([unreg("broker-u2", 0, "127.0.0.1:17972")]))  # the moved state holds broker-u2
        assert p.get("/topics/UTopic2/route")[0] == 404 and p.get("/topics/UTopic3/route")[0] == 200
        # broker-u1's master left in the replayed batch: a slave registering now is the group's only member
        p.wait_served(p.publish([reg("broker-u1", 1, "127.0.0.1:17981", tps=topics("UTopic1", "Base"),
                                     timeout_ms=60_000)]))
        status, body = p.get("/topics/UTopic1/route")
        assert status == 200 and body["brokerDatas"][0]["brokerAddrs"] == {"1": "127.0.0.1:17981"}
        p.check_job()
    finally:
        p.close()


def test_replaying_a_committed_batch_changes_nothing(spark, kafka_bootstrap, tmp_path):
    """The sink's idempotency, driven directly: the same batch id twice writes once."""
    from pipelines.sink import DeltaSink
    from pipelines.step import StepConfig, run_group
    from schemas import events as ev

    sink = DeltaSink(tmp_path / "delta", retention_ms=DEFAULTS.history_retention_ms)
    sink.ensure_tables()
    key, value = ev.encode(reg("broker-r", 0, "127.0.0.1:18911"))
    _, _, rows = run_group("broker-r", [{"partition": 0, "offset": 0, "timestamp": int(time.time() * 1000),
                                         "key": key.decode(), "value": value}], None, int(time.time() * 1000),
                           StepConfig(routing_config(), 1 << 20, 60_000))
    sink.commit(0, rows, {"0": 1}, 1)
    versions = {x.name: DeltaTable(sink.path(x)).version() for x in t.ALL_TABLES}
    sink.commit(0, rows, {"0": 1}, 1)
    assert {x.name: DeltaTable(sink.path(x)).version() for x in t.ALL_TABLES} == versions
    assert len(DeltaTable(sink.path(t.TOPIC_QUEUE)).to_pyarrow_table()) == 2


def test_a_restarted_sink_schedules_the_timeouts_broker_live_shows(tmp_path):
    """A new job instance has heard no group yet: its first progress record already names the
    earliest timeout broker_live implies, and one that passed unheard is looked at again in 5 s."""
    from pipelines.sink import DeltaSink
    from pipelines.step import StepConfig, run_group
    from routeinfo.housekeeping import RECHECK_MS
    from schemas import events as ev
    from schemas.progress import read_progress

    now = int(time.time() * 1000)
    first = DeltaSink(tmp_path / "delta", retention_ms=DEFAULTS.history_retention_ms)
    first.ensure_tables()
    rows = []
    # broker-passed registered 150 s ago with a 120 s timeout; the job died before it expired.
    for i, (name, age_ms, timeout_ms) in enumerate([("broker-soon", 10_000, 60_000),
                                                    ("broker-passed", 150_000, 120_000)]):
        key, value = ev.encode(reg(name, 0, f"127.0.0.1:1{i}911", timeout_ms=timeout_ms))
        record = {"partition": 0, "offset": i, "timestamp": now - age_ms, "key": key.decode(), "value": value}
        rows += run_group(name, [record], None, now - age_ms, StepConfig(routing_config(), 1 << 20, 600_000))[2]
    first.commit(0, rows, {"0": 2}, 2)

    restarted = DeltaSink(tmp_path / "delta", retention_ms=DEFAULTS.history_retention_ms,
                          live_flush_ms=60_000)
    restarted.ensure_tables()
    assert restarted.deadlines.next_deadline() == now - 150_000 + 120_000  # already passed
    assert restarted.deadlines.seeds["broker-soon"].due == now - 10_000 + 60_000
    restarted.commit(1, [], {"0": 2}, 0)  # a batch in which Spark did not call broker-passed
    after = int(time.time() * 1000)
    progress = read_progress(tmp_path / "delta")
    assert progress is not None
    # broker-soon's seed (50 s ahead) still stands; broker-passed is looked at again in 5 s
    assert now + RECHECK_MS <= progress["nextDeadline"] <= after + RECHECK_MS


def test_a_restart_in_the_middle_of_a_deferral_loses_no_liveness_signal(spark, kafka_bootstrap, tmp_path):
    """A heartbeat waits for company (NAMESRV_HEARTBEAT_DEFER_MS); a job stopped while it waits
    reads it in its first batch after the restart: the broker's lastUpdateTimestamp moves to it,
    and the broker is judged from it, not from its registration."""
    from schemas.progress import covers

    def served_update() -> int:
        rows = DeltaTable(str(p.cfg.warehouse / "broker_live")).to_pyarrow_table().to_pylist()
        return int(next(r["lastUpdateTimestamp"] for r in rows if r["brokerName"] == "broker-d"))

    p = Pipeline(spark, kafka_bootstrap, tmp_path, NAMESRV_HEARTBEAT_DEFER_MS="30000").start_job().start_http()
    try:
        addr = "127.0.0.1:17991"
        p.wait_served(p.publish([reg("broker-d", 0, addr, tps=topics("DeferTopic", "Base"), timeout_ms=60_000)]))
        registered = served_update()
        time.sleep(1.0)
        sent_ms = int(time.time() * 1000)
        beat = p.publish([hb("broker-d", 0, addr)])
        time.sleep(2.0)
        _, health = p.get("/healthz")
        assert not covers(health.get("sourceOffsets") or {}, beat), "the heartbeat was read at once, not deferred"
        assert served_update() == registered
        p.stop_job()  # in the middle of the heartbeat's deferral
        p.start_job()
        p.wait_served(beat, timeout=90)
        assert served_update() >= sent_ms - 1_000 and served_update() > registered
        assert p.get("/topics/DeferTopic/route")[0] == 200
        p.check_job()
    finally:
        p.close()
