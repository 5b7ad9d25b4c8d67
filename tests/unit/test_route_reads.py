"""Route, cluster and topic-list bodies (routeinfo.route_reads) from a cut built by routeinfo.snapshot."""

from __future__ import annotations

from routeinfo import route_reads
from tests.helpers import cut, reg


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
