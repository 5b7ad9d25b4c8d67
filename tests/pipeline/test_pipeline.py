"""Issue 2 acceptance: Kafka (Tansu) → Spark (applyInPandasWithState) → Delta → HTTP, all real.

One pipeline serves the module; tests use their own cluster/broker names so they do not see
each other, except the first, which owns DefaultCluster.
"""

from __future__ import annotations

import json
import statistics
import time

import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable

from pipelines.sink import APP_ID
from schemas import tables as t
from tests.conftest import SOURCES, bootstrap_for
from tests.harness import Pipeline
from tests.helpers import hb, reg, topics, unreg

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", params=SOURCES)
def pipe(request, spark, tmp_path_factory):
    """One pipeline per source (ours on Tansu, Spark's connector on Apache Kafka)."""
    source = request.param
    p = Pipeline(spark, bootstrap_for(request, source), tmp_path_factory.mktemp(f"pipeline-{source}"),
                 NAMESRV_KAFKA_SOURCE=source).start_job().start_http()
    yield p
    p.close()


def delta(p: Pipeline, table: t.TableDef, version: int | None = None) -> list[dict]:
    path = str(p.cfg.warehouse / table.name)
    dt = DeltaTable(path) if version is None else DeltaTable(path, version=version)
    return dt.to_pyarrow_table().to_pylist()


def route(p: Pipeline, topic: str):
    return p.get(f"/topics/{topic}/route")


def test_two_groups_are_served_with_rocketmq_shapes(pipe, spark):
    tps = topics("TopicTest", "Other")
    coords = pipe.publish([reg("broker-a", 0, "127.0.0.1:10911", tps=tps), reg("broker-a", 1, "127.0.0.1:10912", tps=tps),
                           reg("broker-b", 0, "127.0.0.1:10921", tps=tps)])
    pipe.wait_served(coords)
    status, body = route(pipe, "TopicTest")
    assert status == 200
    assert [q["brokerName"] for q in body["queueDatas"]] == ["broker-a", "broker-b"]
    by_name = {b["brokerName"]: b for b in body["brokerDatas"]}
    assert by_name["broker-a"]["brokerAddrs"] == {"0": "127.0.0.1:10911", "1": "127.0.0.1:10912"}
    assert by_name["broker-b"]["brokerAddrs"] == {"0": "127.0.0.1:10921"}
    assert body["filterServerTable"] == {}
    status, cluster = pipe.get("/cluster")
    assert cluster["clusterAddrTable"]["DefaultCluster"] == ["broker-a", "broker-b"]
    assert set(cluster["brokerAddrTable"]) >= {"broker-a", "broker-b"}
    assert {"TopicTest", "Other"} <= set(pipe.get("/topics")[1]["topicList"])
    live = [r for r in pipe.get("/brokers/live")[1] if r["clusterName"] == "DefaultCluster"]
    assert sorted(r["brokerAddr"] for r in live) == ["127.0.0.1:10911", "127.0.0.1:10912", "127.0.0.1:10921"]

    # The Delta table itself, compared as a Spark DataFrame.
    rows = [r for r in delta(pipe, t.BROKER_ADDR) if r["brokerName"] in ("broker-a", "broker-b")]
    actual = spark.createDataFrame(rows, schema="brokerName string, cluster string, brokerId long, "
                                                "brokerAddr string, zoneName string, enableActingMaster boolean")
    expected = spark.createDataFrame(
        [("broker-a", "DefaultCluster", 0, "127.0.0.1:10911", None, False),
         ("broker-a", "DefaultCluster", 1, "127.0.0.1:10912", None, False),
         ("broker-b", "DefaultCluster", 0, "127.0.0.1:10921", None, False)], schema=actual.schema)
    assert_df_equality(actual, expected, ignore_row_order=True)


def test_silent_brokers_expire_and_take_their_group_with_them(pipe, figures):
    cluster, name, master, slave = "ExpiryCluster", "broker-exp", "127.0.0.1:11911", "127.0.0.1:11912"
    tps = topics("ExpiryTopic", "ExpiryBase")
    registration = reg(name, 0, master, tps=tps, cluster=cluster, timeout_ms=3000)
    coords = pipe.publish([registration, reg(name, 1, slave, tps=tps, cluster=cluster, timeout_ms=3000)])
    pipe.wait_served(coords)
    assert route(pipe, "ExpiryTopic")[1]["brokerDatas"][0]["brokerAddrs"] == {"0": master, "1": slave}

    # The master keeps heartbeating; the slave stays silent and must leave brokerAddrs.
    def slave_gone():
        pipe.publish([hb(name, 0, master, cluster=cluster)])
        status, body = route(pipe, "ExpiryTopic")
        return status == 200 and body["brokerDatas"][0]["brokerAddrs"] == {"0": master}
    pipe.wait_for(slave_gone, 30, "the silent slave to expire")

    # Now the master goes silent too: queues, cluster membership and the topic itself go.
    last_heartbeat = time.time()
    pipe.publish([hb(name, 0, master, cluster=cluster)])
    pipe.wait_for(lambda: route(pipe, "ExpiryTopic")[0] == 404, 30, "the group to expire")
    overshoot = time.time() - last_heartbeat - 3.0
    figures(f"expiry overshoot (removal served - last heartbeat - 3 s timeout): {overshoot:.2f} s")
    _status, body = route(pipe, "ExpiryTopic")
    assert body == {"code": "TOPIC_NOT_EXIST",
                    "remark": "No topic route info in name server for the topic: ExpiryTopic"}
    cluster_info = pipe.get("/cluster")[1]
    assert cluster not in cluster_info["clusterAddrTable"] and name not in cluster_info["brokerAddrTable"]
    assert overshoot < 10

    # The master's registration repeated as the remoting front publishes it, small: the group is
    # gone, so the job reads the body it names back from Kafka and registers the master again.
    from routeinfo.state import topic_keys_digest
    from schemas import events as ev
    offset = coords[0][1]
    pipe.wait_served(pipe.publish([ev.repeated_registration_event(
        registration, [offset], topic_keys_digest(registration["topicConfigTable"]), timestamp=int(time.time() * 1000))]))
    status, body = route(pipe, "ExpiryTopic")
    assert status == 200 and body["brokerDatas"][0]["brokerAddrs"] == {"0": master}, body
    assert {q["brokerName"] for q in body["queueDatas"]} == {name}


def test_unregister_takes_effect_at_the_next_batch(pipe):
    cluster, name = "UnregCluster", "broker-unreg"
    pipe.wait_served(pipe.publish([reg(name, 0, "127.0.0.1:12911", tps=topics("UnregTopic", "UnregBase"),
                                       cluster=cluster)]))
    assert route(pipe, "UnregTopic")[0] == 200
    started = time.time()
    pipe.wait_served(pipe.publish([unreg(name, 0, "127.0.0.1:12911", cluster=cluster)]))
    assert route(pipe, "UnregTopic")[0] == 404
    assert cluster not in pipe.get("/cluster")[1]["clusterAddrTable"]
    assert time.time() - started < 60  # far below the 120 s default timeout


def test_slave_re_registering_as_master_replaces_its_old_id(pipe):
    cluster, name, a0, a1 = "SwitchCluster", "broker-switch", "127.0.0.1:13911", "127.0.0.1:13912"
    tps = topics("SwitchTopic", "SwitchBase")
    pipe.wait_served(pipe.publish([reg(name, 0, a0, tps=tps, cluster=cluster), reg(name, 1, a1, tps=tps, cluster=cluster),
                                   unreg(name, 0, a0, cluster=cluster),
                                   reg(name, 0, a1, tps=tps, cluster=cluster, counter=2)]))
    assert route(pipe, "SwitchTopic")[1]["brokerDatas"][0]["brokerAddrs"] == {"0": a1}


def test_queue_counts_change_only_with_a_new_data_version(pipe):
    cluster, name, addr = "DvCluster", "broker-dv", "127.0.0.1:14911"

    def counts():
        return [(q["readQueueNums"], q["writeQueueNums"]) for q in route(pipe, "DvTopic")[1]["queueDatas"]]
    pipe.wait_served(pipe.publish([reg(name, 0, addr, tps=topics("DvTopic", "DvBase", read=8, write=8), cluster=cluster)]))
    assert counts() == [(8, 8)]
    pipe.wait_served(pipe.publish([reg(name, 0, addr, tps=topics("DvTopic", "DvBase", read=16, write=16),
                                       cluster=cluster, counter=1)]))
    assert counts() == [(8, 8)]
    pipe.wait_served(pipe.publish([reg(name, 0, addr, tps=topics("DvTopic", "DvBase", read=16, write=16),
                                       cluster=cluster, counter=2)]))
    assert counts() == [(16, 16)]


def test_garbage_is_quarantined_and_the_job_keeps_serving(pipe):
    bad = [(b"broker-bad", b"this is not json"),
           (b"broker-bad", json.dumps({"type": "REGISTER_BROKER", "clusterName": "BadCluster",
                                       "brokerName": "broker-bad", "brokerId": "zero",
                                       "brokerAddr": "127.0.0.1:15911"}).encode()),
           (b"broker-bad", json.dumps({"type": "REGISTER_BROKER", "clusterName": "BadCluster", "brokerId": 0,
                                       "brokerAddr": "127.0.0.1:15911"}).encode())]
    bad_coords = pipe.publisher.publish_raw(bad)
    good = pipe.publish([reg("broker-good", 0, "127.0.0.1:15912", tps=topics("GoodTopic", "GoodBase"),
                             cluster="BadCluster")])
    pipe.wait_served(bad_coords + good)
    assert route(pipe, "GoodTopic")[0] == 200
    dead = {(r["partition"], r["offset"]): r for r in delta(pipe, t.DEAD_LETTER)}
    reasons = [dead[c]["reason"] for c in bad_coords]
    assert "not JSON" in reasons[0]
    assert "brokerId must be an integer" in reasons[1]
    assert "missing required field 'brokerName'" in reasons[2]
    assert [dead[c]["value"] for c in bad_coords] == [v for _, v in bad]


def test_publish_to_served_latency_over_20_registrations(pipe, figures):
    latencies = []
    for i in range(20):
        started = time.time()
        pipe.publish([reg(f"broker-lat{i}", 0, f"127.0.0.1:{16000 + i}", tps=topics(f"LatTopic{i}", "LatBase"),
                          cluster="LatCluster")])
        pipe.wait_for(lambda i=i: route(pipe, f"LatTopic{i}")[0] == 200, 30, f"LatTopic{i}")
        latencies.append(time.time() - started)
    figures(f"publish -> route served over 20 registrations: median {statistics.median(latencies):.2f} s, "
            f"worst {max(latencies):.2f} s")
    assert max(latencies) < 30


def test_every_snapshot_row_is_a_consistent_cut(pipe):
    snaps = sorted(delta(pipe, t.SNAPSHOTS), key=lambda r: r["snapshotId"])
    ids = [s["snapshotId"] for s in snaps]
    assert ids and len(ids) == len(set(ids))
    for table in t.CUT_TABLES:
        path = str(pipe.cfg.warehouse / table.name)
        versions = [s[t.version_column(table)] for s in snaps]
        assert versions == sorted(versions), f"{table.name} versions go backwards"
        # A version that first appears in snapshot N was committed by batch N, exactly once.
        previous = 0
        for s in snaps:
            v = s[t.version_column(table)]
            if v != previous:
                assert v == previous + 1, f"{table.name}: more than one commit in batch {s['batchId']}"
                assert DeltaTable(path, version=v).transaction_version(APP_ID) == s["batchId"]
            previous = v
        assert DeltaTable(path).version() == previous, f"{table.name} has commits no snapshot row covers"
    for s in snaps[-5:]:
        cut = {x.name: delta(pipe, x, s[t.version_column(x)]) for x in t.STATE_TABLES}
        with_addrs = {r["brokerName"] for r in cut[t.BROKER_ADDR.name]}
        assert {r["brokerName"] for r in cut[t.TOPIC_QUEUE.name]} <= with_addrs
        assert with_addrs <= {r["brokerName"] for r in cut[t.CLUSTER_ADDR.name]}
        keys = [(r["topic"], r["brokerName"]) for r in cut[t.TOPIC_QUEUE.name]]
        assert len(keys) == len(set(keys)), "duplicate (topic, brokerName) rows"
