"""Every read over a cut served from the shared file (snapshots/mapped.py) is the read over the
cut loaded from Delta: routes (with and without the client's zone), the cluster info, the topic
lists, a group's topics, the QueueDatas behind `snap.topics`, and the remoting replies' bodies; and
a cut mapped after the one served (`mapped_snapshot(cut, previous)`, its tables taken from the
served cut when the head's are the same) is the cut mapped on its own."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from remoting import codes, replies, requests
from routeinfo import route_reads
from routeinfo.snapshot import Snapshot
from schemas import tables as t
from snapshots.cutfile import CutFile, write_cut
from snapshots.mapped import mapped_snapshot
from tests.serving.test_cutfile import ABSENT, broker_rows, fleet, fleet_tables, queue_row, switch_rows, with_tables


def _outcome(read: Any, *args: Any) -> Any:
    try:
        return read(*args)
    except route_reads.Disabled:
        return "disabled"


def _body(reply: replies.Reply) -> tuple[int, bytes]:
    return reply.code, bytes(reply.body)


def assert_same_reads(snap: Snapshot, path: Path) -> None:
    write_cut(snap, path)
    mapped = mapped_snapshot(CutFile.open(path))
    assert mapped.cut is not None and mapped.snapshot_id == snap.snapshot_id
    zones = sorted({bd.get("zoneName") or "" for bd in snap.brokers.values()} | {"elsewhere"})
    for topic in [*snap.topics, *ABSENT]:
        assert route_reads.route_body(mapped, topic) == route_reads.route_body(snap, topic), topic
        for zone in zones:
            assert route_reads.topic_route(mapped, topic, zone=zone) == route_reads.topic_route(snap, topic, zone=zone)
            ext = {"topic": topic, "__ZONE_MODE": "true", "__ZONE_NAME": zone}
            assert _body(replies.get_route(mapped, ext)) == _body(replies.get_route(snap, ext)), (topic, zone)
        assert _body(replies.get_route(mapped, {"topic": topic})) == _body(replies.get_route(snap, {"topic": topic}))
        assert (topic in mapped.topics) == (topic in snap.topics)
        if topic in snap.topics:
            assert mapped.topics[topic] == snap.topics[topic], topic
    assert dict(mapped.topics.items()) == dict(snap.topics.items()) and len(mapped.topics) == len(snap.topics)
    assert route_reads.cluster_info_body(mapped) == route_reads.cluster_info_body(snap)
    assert _body(replies.cluster_info(mapped, {})) == _body(replies.cluster_info(snap, {}))
    assert _outcome(route_reads.all_topics, mapped) == _outcome(route_reads.all_topics, snap)
    for cluster in [*snap.clusters, "NoSuchCluster"]:
        assert _outcome(route_reads.topics_by_cluster, mapped, cluster) == \
            _outcome(route_reads.topics_by_cluster, snap, cluster), cluster
    for kind in ("unit", "unit-sub", "unit-sub-ununit"):
        assert _outcome(route_reads.unit_topics, mapped, kind) == _outcome(route_reads.unit_topics, snap, kind), kind
    assert route_reads.system_topics(mapped) == route_reads.system_topics(snap)
    groups = {q["brokerName"] for queues in snap.topics.values() for q in queues} | {"no-such-group"}
    for group in groups:
        assert route_reads.topics_hosted_by(mapped, group) == route_reads.topics_hosted_by(snap, group), group
        assert mapped.topics.topic_keys_of(group) == snap.topics.topic_keys_of(group), group
        held = [topic for topic, queues in snap.topics.items() if any(q["brokerName"] == group for q in queues)]
        for asked in (held, held[:1], [*held, "NotHeldHere"], []):
            assert requests.topics_shown_by(mapped, group, asked) == requests.topics_shown_by(snap, group, asked), group
    for code in (codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, codes.GET_SYSTEM_TOPIC_LIST_FROM_NS,
                 codes.GET_UNIT_TOPIC_LIST, codes.GET_HAS_UNIT_SUB_TOPIC_LIST):
        assert _body(replies.READS[code](mapped, {})) == _body(replies.READS[code](snap, {})), code


def test_a_fleet_reads_alike_from_the_file(tmp_path: Path) -> None:
    assert_same_reads(fleet(), tmp_path / "cut")


def test_zones_acting_masters_orphans_and_flags_read_alike(tmp_path: Path) -> None:
    tables = fleet_tables(groups=6, per_group=3)
    tables[t.BROKER_ADDR.name] += broker_rows("zoned", "ZoneCluster", {0: "10.9.0.1:1", 1: "10.9.0.2:1"}, zone="az1")
    tables[t.BROKER_ADDR.name] += broker_rows("acting", "ZoneCluster", {1: "10.9.0.3:1", 2: "10.9.0.4:1"}, zone="az2",
                                                 acting=True)
    tables[t.CLUSTER_ADDR.name] += [{"clusterName": "ZoneCluster", "brokerName": n} for n in ("zoned", "acting")]
    tables[t.TOPIC_QUEUE.name] += [queue_row("Zoned", "zoned", flag=1), queue_row("Zoned", "acting", perm=4, flag=3),
                                   queue_row("Orphan", "gone-group", flag=2), queue_row("Orphan", "other-gone")]
    snap = with_tables(tables, **{t.NAMESRV_CONFIG.name: switch_rows(supportActingMaster=True)})
    assert route_reads.route_body(snap, "Orphan") is None and "Orphan" in snap.topics
    assert_same_reads(snap, tmp_path / "cut")
    off = with_tables(tables, snapshot_id=9, **{t.NAMESRV_CONFIG.name: switch_rows(enableTopicList=False,
                                                                                   enableAllTopicList=False)})
    assert_same_reads(off, tmp_path / "off")


FIELDS = [f.name for f in dataclasses.fields(Snapshot) if f.name not in ("topics", "cut", "route_bodies", "cut_bodies",
                                                                          "holders")]


def test_a_cut_mapped_after_the_served_one_is_the_cut_mapped_alone(tmp_path: Path) -> None:
    tables = fleet_tables(groups=6, per_group=3)
    path = tmp_path / "current.cut"
    first = with_tables(tables, snapshot_id=1)
    write_cut(first, path)
    served = mapped_snapshot(CutFile.open(path))
    live = [dict(r, lastUpdateTimestamp=r["lastUpdateTimestamp"] + 7) for r in tables["broker_live"][1:]]
    addr = [dict(r, brokerAddr="10.7.7.7:1") if r["brokerName"] == "broker-2" else r for r in tables["broker_addr"]]
    kv = tables[t.KV_CONFIG.name] + [{"namespace": "ns", "key": "k2", "value": "v2"}]
    for i, (changed, tables_same) in enumerate([
            ({"broker_live": live}, True),  # a heartbeat's cut: the head's tables are the served cut's
            ({"topic_queue": tables["topic_queue"] + [queue_row("Added", "broker-1")]}, True),  # routes only
            ({"broker_addr": addr}, False), ({t.KV_CONFIG.name: kv}, False),
            ({"topic_queue": tables["topic_queue"] + [queue_row("Orphan2", "gone")]}, False)], start=2):
        snap = with_tables(tables, snapshot_id=i, **changed)
        write_cut(snap, path, served.cut)
        after = mapped_snapshot(CutFile.open(path, reuse=served.cut), served)
        alone = mapped_snapshot(CutFile.open(path))
        assert after.cut is not None and (after.cut.tables_digest == served.cut.tables_digest) == tables_same, i
        assert (after.brokers is served.brokers) == tables_same, i  # taken as they were, or read again
        for name in FIELDS:
            assert getattr(after, name) == getattr(alone, name) == getattr(snap, name), (i, name)
        assert dict(after.topics.items()) == dict(alone.topics.items()) == dict(snap.topics.items()), i
        assert after.route_bodies == {} and after.cut_bodies == {}
        assert route_reads.cluster_info_body(after) == route_reads.cluster_info_body(snap)
        for group in {q["brokerName"] for queues in snap.topics.values() for q in queues}:
            assert after.topics.topic_keys_of(group) == snap.topics.topic_keys_of(group), (i, group)
        served = after
