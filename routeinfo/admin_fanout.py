"""Admin writes as events (pure): the fan-out RocketMQ's RouteInfoManager does inside one
request (`deleteTopic(topic, cluster)`, `registerTopic`), done here against the served
snapshot, one event per hosting broker group (each group applies its share in the job)."""

from __future__ import annotations

from typing import Any

from routeinfo.snapshot import Snapshot
from schemas import events as ev


def delete_topic(snap: Snapshot, topic: str, cluster: str | None) -> list[dict[str, Any]]:
    """§7.2: with a cluster, only its brokers' queues; otherwise every hosting group's."""
    hosts = [q["brokerName"] for q in snap.topics.get(topic, [])]
    if cluster:
        members = set(snap.clusters.get(cluster, []))
        hosts = [h for h in hosts if h in members]
    return [ev.delete_topic_event(topic, h, cluster) for h in hosts]


def register_topic(snap: Snapshot, topic: str, queue_datas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """§7.3: a new topic needs every broker known (else nothing); an existing one applies
    QueueDatas in order up to the first unknown broker."""
    known = [q["brokerName"] in snap.brokers for q in queue_datas]
    if topic not in snap.topics:
        return [ev.register_topic_event(topic, q) for q in queue_datas] if all(known) else []
    out = []
    for q, ok in zip(queue_datas, known, strict=False):
        if not ok:
            break
        out.append(ev.register_topic_event(topic, q))
    return out
