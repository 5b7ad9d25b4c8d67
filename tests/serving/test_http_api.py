"""The HTTP API against the running system: writes with auth and read-your-writes, input
validation, switches, and the broker lookups of issue 3."""

from __future__ import annotations

import statistics
import time

import pytest
import requests
from kafka import KafkaConsumer, TopicPartition

from tests.harness import ADMIN_TOKEN, Pipeline
from tests.helpers import reg, topics

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pipe(spark, kafka_bootstrap, tmp_path_factory):
    p = Pipeline(spark, kafka_bootstrap, tmp_path_factory.mktemp("http")).start_job().start_http()
    yield p
    p.close()


def end_offsets(p: Pipeline) -> dict[int, int]:
    c = KafkaConsumer(bootstrap_servers=p.cfg.bootstrap)
    try:
        tps = [TopicPartition(p.cfg.kafka_topic, i) for i in sorted(c.partitions_for_topic(p.cfg.kafka_topic))]
        return {tp.partition: off for tp, off in c.end_offsets(tps).items()}
    finally:
        c.close()


@pytest.mark.parametrize("token", [None, "wrong-token", ""])
def test_writes_without_the_token_are_refused_and_publish_nothing(pipe, token):
    before = end_offsets(pipe)
    for method, path, body in [("PUT", "/kv/ns/k", {"value": "v"}), ("DELETE", "/kv/ns/k", None),
                               ("POST", "/brokers/broker-a/wipe-write-perm", None),
                               ("POST", "/brokers/broker-a/add-write-perm", None),
                               ("DELETE", "/topics/TopicTest", None), ("PUT", "/config", {"enableTopicList": False}),
                               ("PUT", "/topics/T/route", {"queueDatas": []})]:
        status, answer = pipe.write(method, path, body, token=token)
        assert status == 401 and answer["code"] == "NO_PERMISSION", (method, path, answer)
    assert end_offsets(pipe) == before


@pytest.mark.parametrize("method, path, body, reason", [
    ("PUT", "/topics/bad%20topic/route", {"queueDatas": []}, "characters outside"),
    ("PUT", "/topics/" + "x" * 128 + "/route", {"queueDatas": []}, "longer than 127"),
    ("PUT", "/topics/T/route", {"queueDatas": [{"brokerName": "b", "perm": 9}]}, "perm=9 is outside 0..7"),
    ("PUT", "/topics/T/route", {"queueDatas": [{"brokerName": "b", "readQueueNums": -1}]}, "readQueueNums=-1"),
    ("PUT", "/topics/T/route", {"queueDatas": [{"brokerName": "bad name"}]}, "brokerName 'bad name'"),
    ("PUT", "/topics/T/route", {"nope": 1}, "queueDatas"),
    ("POST", "/brokers/bad$name/wipe-write-perm", None, "brokerName 'bad$name'"),
    ("DELETE", "/topics/T?cluster=bad%20cluster", None, "cluster 'bad cluster'"),
    ("PUT", "/kv/ns/k", {"value": 5}, "value"),
    ("PUT", "/kv/ns/k", None, "JSON object"),
    ("PUT", "/kv/bad%20ns/k", {"value": "v"}, "namespace 'bad ns'"),
    ("PUT", "/config", {"configStorePath": "/tmp/x"}, "not an updatable runtime switch"),
    ("PUT", "/config", {"kvConfigPath": "/tmp/x"}, "not an updatable runtime switch"),
    ("PUT", "/config", {"enableTopicList": "maybe"}, "takes true or false"),
])
def test_invalid_writes_get_400_with_a_reason_and_publish_nothing(pipe, method, path, body, reason):
    before = end_offsets(pipe)
    status, answer = pipe.write(method, path, body)
    assert status == 400 and answer["code"] == "INVALID_PARAMETER" and reason in answer["remark"], answer
    assert end_offsets(pipe) == before


def test_kv_round_trip_with_read_your_writes_and_empty_namespace(pipe):
    assert pipe.get("/kv/kvns") == (404, {"code": "QUERY_NOT_FOUND", "remark": "No config item, Namespace: kvns"})
    assert pipe.write("PUT", "/kv/kvns/k1", {"value": "v1"}) == (200, {"value": "v1"})
    assert pipe.get("/kv/kvns/k1") == (200, {"value": "v1"})
    assert pipe.get("/kv/kvns") == (200, {"table": {"k1": "v1"}})
    assert pipe.write("DELETE", "/kv/kvns/k1")[0] == 200
    assert pipe.get("/kv/kvns/k1") == (404, {"code": "QUERY_NOT_FOUND",
                                            "remark": "No config item, Namespace: kvns Key: k1"})
    assert pipe.get("/kv/kvns") == (200, {"table": {}})  # RocketMQ keeps the emptied namespace


def test_wait_false_answers_202_and_the_write_lands(pipe):
    status, body = pipe.write("PUT", "/kv/asyncns/k?wait=false", {"value": "later"})
    assert status == 202 and body["code"] == "ACCEPTED" and body["offsets"]
    pipe.wait_for(lambda: pipe.get("/kv/asyncns/k") == (200, {"value": "later"}), 30, "the async write")


def test_write_perm_commands_count_and_change_perms(pipe):
    pipe.wait_served(pipe.publish([reg("perm-b", 0, "127.0.0.1:21911", tps=topics("PermA", "PermB", perm=7),
                                       cluster="PermCluster")]))
    assert pipe.write("POST", "/brokers/perm-b/wipe-write-perm") == (200, {"wipeTopicCount": 2})
    assert pipe.get("/topics/PermA/route")[1]["queueDatas"][0]["perm"] == 5
    assert pipe.write("POST", "/brokers/perm-b/wipe-write-perm") == (200, {"wipeTopicCount": 2})
    assert pipe.write("POST", "/brokers/perm-b/add-write-perm") == (200, {"addTopicCount": 2})
    assert pipe.get("/topics/PermA/route")[1]["queueDatas"][0]["perm"] == 6
    assert pipe.write("POST", "/brokers/nobody/add-write-perm") == (200, {"addTopicCount": 0})


def test_delete_and_register_topic_fan_out(pipe):
    pipe.wait_served(pipe.publish([
        reg("fan-a", 0, "127.0.0.1:22911", tps=topics("FanTopic", "FanBase"), cluster="FanC1"),
        reg("fan-b", 0, "127.0.0.1:22921", tps=topics("FanTopic", "FanBase"), cluster="FanC2")]))
    status, body = pipe.write("DELETE", "/topics/FanTopic?cluster=FanC1")
    assert status == 200 and body["brokerNames"] == ["fan-a"]
    assert [q["brokerName"] for q in pipe.get("/topics/FanTopic/route")[1]["queueDatas"]] == ["fan-b"]
    qd = {"readQueueNums": 2, "writeQueueNums": 2, "perm": 6, "topicSysFlag": 0}
    status, body = pipe.write("PUT", "/topics/NewFan/route", {"queueDatas": [{"brokerName": "fan-a", **qd},
                                                                             {"brokerName": "ghost", **qd}]})
    assert status == 200 and body["brokerNames"] == [] and "ghost" in body["remark"]  # all-or-nothing
    assert pipe.get("/topics/NewFan/route")[0] == 404
    status, body = pipe.write("PUT", "/topics/NewFan/route", {"queueDatas": [{"brokerName": "fan-a", **qd},
                                                                             {"brokerName": "fan-b", **qd}]})
    assert status == 200 and body["brokerNames"] == ["fan-a", "fan-b"]
    assert len(pipe.get("/topics/NewFan/route")[1]["queueDatas"]) == 2
    assert pipe.write("DELETE", "/topics/NewFan") == (200, {"code": "SUCCESS", "brokerNames": ["fan-a", "fan-b"]})
    assert pipe.get("/topics/NewFan/route")[0] == 404


def test_switches_gate_lists_and_enable_order_conf(pipe):
    pipe.wait_served(pipe.publish([reg("sw-a", 0, "127.0.0.1:23911", tps=topics("OrderTopic", "SwBase"),
                                       cluster="SwCluster")]))
    assert pipe.write("PUT", "/kv/ORDER_TOPIC_CONFIG/OrderTopic", {"value": "sw-a:8"})[0] == 200
    assert "orderTopicConf" not in pipe.get("/topics/OrderTopic/route")[1]
    try:
        status, body = pipe.write("PUT", "/config", {"enableTopicList": False, "orderMessageEnable": True})
        assert status == 200 and body["config"]["enableTopicList"] is False
        assert pipe.get("/config")[1]["config"]["orderMessageEnable"] is True
        assert pipe.get("/topics/unit") == (403, {"code": "SYSTEM_ERROR", "remark": "disable"})
        assert pipe.get("/clusters/SwCluster/topics")[0] == 403
        assert pipe.get("/topics")[0] == 200  # enableAllTopicList is a separate switch
        assert pipe.get("/topics/system")[0] == 200  # never gated
        assert pipe.get("/topics/OrderTopic/route")[1]["orderTopicConf"] == "sw-a:8"
    finally:
        pipe.write("PUT", "/config", {"enableTopicList": True, "orderMessageEnable": False})


def test_broker_lookups_zone_filter_and_members(pipe):
    m, s = "127.0.0.1:24911", "127.0.0.1:24912"
    pipe.wait_served(pipe.publish([
        reg("zone-a", 0, m, tps=topics("ZoneTopic", "ZoneBase"), cluster="ZoneC", zone="z1", ha="127.0.0.1:24913"),
        reg("zone-a", 1, s, tps=topics("ZoneTopic", "ZoneBase"), cluster="ZoneC", zone="z1"),
        reg("zone-b", 0, "127.0.0.1:24921", tps=topics("ZoneTopic", "ZoneBase"), cluster="ZoneC", zone="z2")]))
    route = pipe.get("/topics/ZoneTopic/route?zone=Z1")[1]
    assert [b["brokerName"] for b in route["brokerDatas"]] == ["zone-a"]
    assert [q["brokerName"] for q in route["queueDatas"]] == ["zone-a"]
    assert len(pipe.get("/topics/ZoneTopic/route")[1]["brokerDatas"]) == 2
    assert pipe.get("/brokers/zone-a/master") == (200, {"masterAddr": m, "haServerAddr": "127.0.0.1:24913"})
    assert pipe.get("/brokers/nobody/master") == (200, {"masterAddr": None, "haServerAddr": None})
    assert pipe.get("/brokers/ZoneC/zone-a/members")[1] == {"brokerMemberGroup": {
        "cluster": "ZoneC", "brokerName": "zone-a", "brokerAddrs": {"0": m, "1": s}}}
    dv = {"counter": 1, "stateVersion": 0, "timestamp": 1}
    q = "counter=1&timestamp=1&stateVersion=0"
    assert pipe.get(f"/brokers/ZoneC/{m}/data-version?{q}") == (200, {"changed": False, "dataVersion": dv})
    assert pipe.get(f"/brokers/ZoneC/{m}/data-version?counter=2")[1]["changed"] is True
    assert pipe.get("/brokers/ZoneC/127.0.0.1:1/data-version?counter=1") == (200, {"changed": True})
    assert pipe.get("/brokers/ZoneC/nohost/data-version")[0] == 400


def test_write_latency_over_25_kv_puts(pipe, figures):
    latencies = []
    session = requests.Session()
    for i in range(25):
        started = time.time()
        r = session.put(f"{pipe.url}/kv/latency/k{i}", json={"value": str(i)},
                        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=60)
        latencies.append(time.time() - started)
        assert r.status_code == 200 and r.json() == {"value": str(i)}
        assert session.get(f"{pipe.url}/kv/latency/k{i}").json() == {"value": str(i)}
    figures(f"HTTP write -> answered with the change visible, 25 KV PUTs: median "
            f"{statistics.median(latencies):.2f} s, worst {max(latencies):.2f} s")


def test_a_write_that_is_not_materialized_in_time_gets_504_with_offsets(spark, kafka_bootstrap, tmp_path):
    p = Pipeline(spark, kafka_bootstrap, tmp_path, NAMESRV_WRITE_TIMEOUT_MS="1500").start_http()  # no job
    try:
        status, body = p.write("PUT", "/kv/ns/k", {"value": "v"})
        assert status == 504 and body["code"] == "SYSTEM_BUSY" and body["offsets"][0]["offset"] >= 0
    finally:
        p.close()
