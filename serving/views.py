"""RocketMQ response bodies built from a Snapshot (pure functions, RocketMQ field names)."""

from __future__ import annotations

import copy
from typing import Any

from serving.snapshot import Snapshot


def topic_route(snap: Snapshot, topic: str) -> dict[str, Any] | None:
    """TopicRouteData (§6.1), or None when RocketMQ would answer TOPIC_NOT_EXIST.

    Found only if the topic has queue data and at least one of its brokers has a BrokerData.
    """
    queue_datas = snap.topics.get(topic)
    if not queue_datas:
        return None
    broker_datas = [copy.deepcopy(snap.brokers[q["brokerName"]]) for q in queue_datas
                    if q["brokerName"] in snap.brokers]
    if not broker_datas:
        return None
    filter_table: dict[str, list[str]] = {}
    if snap.filters:
        for bd in broker_datas:
            for addr in bd["brokerAddrs"].values():
                servers = snap.filters.get((bd["cluster"], addr))
                if servers is not None:
                    filter_table[addr] = servers
    return {"brokerDatas": broker_datas, "filterServerTable": filter_table,
            "queueDatas": [dict(q) for q in queue_datas]}


def cluster_info(snap: Snapshot) -> dict[str, Any]:
    """ClusterInfo (§6.3): brokerAddrTable and clusterAddrTable."""
    return {"brokerAddrTable": snap.brokers, "clusterAddrTable": snap.clusters}


def all_topics(snap: Snapshot) -> dict[str, Any]:
    return {"topicList": sorted(snap.topics)}


def live_brokers(snap: Snapshot) -> list[dict[str, Any]]:
    return snap.live
