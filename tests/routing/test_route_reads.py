"""Route, cluster and topic-list bodies (routeinfo.route_reads) from a cut built by routeinfo.snapshot."""

from __future__ import annotations

import json

from routeinfo import route_reads
from tests.helpers import cut, reg, topics


def test_route_has_rocketmq_field_names_and_string_ids():
    snap = cut(reg("broker-b", 0, "10.0.0.3:1"), reg("broker-a", 0, "10.0.0.1:1"), reg("broker-a", 1, "10.0.0.2:1"))
    route = route_reads.topic_route(snap, "TopicTest")
    assert route == {
        "brokerDatas": [
            {"brokerAddrs": {"0": "10.0.0.1:1", "1": "10.0.0.2:1"}, "brokerName": "broker-a",
             "cluster": "DefaultCluster", "enableActingMaster": False},
            {"brokerAddrs": {"0": "10.0.0.3:1"}, "brokerName": "broker-b", "cluster": "DefaultCluster",
             "enableActingMaster": False}],
        "filterServerTable": {},
        "queueDatas": [
            {"brokerName": "broker-a", "perm": 6, "readQueueNums": 8, "topicSysFlag": 0, "writeQueueNums": 8},
            {"brokerName": "broker-b", "perm": 6, "readQueueNums": 8, "topicSysFlag": 0, "writeQueueNums": 8}]}
    assert route_reads.cluster_info(snap)["clusterAddrTable"] == {"DefaultCluster": ["broker-a", "broker-b"]}
    assert route_reads.all_topics(snap) == {"topicList": ["Base", "TopicTest"]}


def test_unknown_topic_has_no_route():
    assert route_reads.topic_route(cut(reg("a", 0, "10.0.0.1:1")), "Nope") is None


def test_zone_and_filter_servers_appear_when_set():
    snap = cut(reg("a", 0, "10.0.0.1:1", zone="z1", filters=["10.0.0.9:7"]))
    route = route_reads.topic_route(snap, "TopicTest")
    assert route["brokerDatas"][0]["zoneName"] == "z1"
    assert route["filterServerTable"] == {"10.0.0.1:1": ["10.0.0.9:7"]}


def test_route_mutation_does_not_leak_into_the_snapshot():
    snap = cut(reg("a", 0, "10.0.0.1:1"))
    route_reads.topic_route(snap, "TopicTest")["brokerDatas"][0]["brokerAddrs"]["9"] = "x"
    assert "9" not in route_reads.topic_route(snap, "TopicTest")["brokerDatas"][0]["brokerAddrs"]


# java.util.HashMap<String, ?>.keySet() order, printed by Java 17 for these keys inserted in this order
JAVA_HASHMAP_ORDERS = [
    (["broker-a", "broker-b", "broker-c"], ["broker-b", "broker-c", "broker-a"]),
    (["d466xb0", "d466xb1", "d466xb2"], ["d466xb2", "d466xb0", "d466xb1"]),
    (["zeta", "alpha", "mid", "Broker_9", "broker-10", "x"], ["zeta", "Broker_9", "broker-10", "alpha", "x", "mid"]),
    ([f"b{i}" for i in range(20)],  # 20 keys: the table has doubled to 32 buckets
     ["b10", "b12", "b11", "b14", "b13", "b16", "b15", "b18", "b17", "b19"] + [f"b{i}" for i in range(10)]),
]


def test_java_hash_order_is_hashmaps():
    from routeinfo.route_reads import java_hash_order, java_string_hash
    assert java_string_hash("hello") == 99162322 and java_string_hash("") == 0
    for keys, java in JAVA_HASHMAP_ORDERS:
        assert java_hash_order(keys) == java


def test_unit_lists_test_the_queue_data_rocketmq_sees_first():
    """RocketMQ's getUnitTopics takes queueDatas.values().iterator().next(): for broker-a/b/c that
    is broker-b's (see JAVA_HASHMAP_ORDERS), not the smallest name's."""
    snap = cut(reg("broker-a", 0, "10.0.0.1:1", tps=topics("U", "V", sys_flag=0)),
               reg("broker-b", 0, "10.0.0.2:1", tps=topics("U", "V", sys_flag=1)),
               reg("broker-c", 0, "10.0.0.3:1", tps=topics("U", "V", sys_flag=0)))
    assert route_reads.unit_topics(snap, "unit") == {"topicList": ["U", "V"]}


def test_holder_of_an_address_is_found_in_its_cluster_only():
    snap = cut(reg("broker-a", 1, "10.0.0.1:1", cluster="C1"))
    assert route_reads.holder_of(snap, "C1", "10.0.0.1:1") == ("broker-a", 1)
    assert route_reads.holder_of(snap, "C2", "10.0.0.1:1") is None
    assert route_reads.holder_of(snap, "C1", "10.0.0.9:1") is None


def test_holder_of_an_address_held_twice_is_the_smallest_name_then_id():
    """The index built on first use answers as the scan it replaced: the first BrokerData in name
    order, the first id within it; another cut has its own index."""
    snap = cut(reg("broker-b", 0, "10.0.0.1:1"), reg("broker-a", 2, "10.0.0.1:1"),
               reg("broker-a", 1, "10.0.0.1:1"), reg("broker-c", 0, "10.0.0.3:1"))
    assert route_reads.holder_of(snap, "DefaultCluster", "10.0.0.1:1") == ("broker-a", 1)
    assert route_reads.holder_of(snap, "DefaultCluster", "10.0.0.3:1") == ("broker-c", 0)
    later = cut(reg("broker-c", 0, "10.0.0.1:1"))
    assert route_reads.holder_of(later, "DefaultCluster", "10.0.0.1:1") == ("broker-c", 0)
    assert route_reads.holder_of(later, "DefaultCluster", "10.0.0.3:1") is None


def test_the_cluster_info_body_is_encoded_once_per_cut():
    snap = cut(reg("broker-a", 0, "10.0.0.1:1"), reg("broker-b", 0, "10.0.0.3:1"))
    body = route_reads.cluster_info_body(snap)
    assert json.loads(body) == json.loads(json.dumps(route_reads.cluster_info(snap)))
    assert route_reads.cluster_info_body(snap) is body  # kept with the cut, not rebuilt per request
    other = cut(reg("broker-a", 0, "10.0.0.1:1"))
    assert json.loads(route_reads.cluster_info_body(other))["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
