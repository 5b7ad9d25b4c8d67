"""RouteInfoManager's reads: RocketMQ response bodies built from a Snapshot (pure, RocketMQ field names).

Each function mirrors one RouteInfoManager/KVConfigManager read (§ numbers of
docs/semantics.md); where this project deliberately differs, the docstring says so. The HTTP
blueprints, the notebooks and the remoting front all answer through these functions.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from routeinfo.snapshot import Snapshot
from schemas import events as ev
from schemas import fields, json_codec

Body = bytes | memoryview  # a body as the remoting front writes it: a view of the cut file, or bytes

SYNC_BROKER_MEMBER_PREFIX = "rmq_sys_SYNC_BROKER_MEMBER_"


def topic_route(snap: Snapshot, topic: str, *, zone: str | None = None) -> dict[str, Any] | None:
    """TopicRouteData (§6.1, §6.2, §6.4), or None when RocketMQ would answer TOPIC_NOT_EXIST: the
    caller's to change (its BrokerDatas are copies, not the cut's).

    Found only if the topic has queue data and at least one of its brokers has a BrokerData.
    `zone` applies the ZoneRouteRPCHook filter (client zone mode on, zone name set). A cut served
    from the shared file has the route encoded already (before the zone filter): decoded here.
    """
    if snap.cut is not None:
        return _decoded_route(snap.cut.route_body(topic), zone)
    return _route(snap, topic, zone, owned=True)


def _route(snap: Snapshot, topic: str, zone: str | None, *, owned: bool) -> dict[str, Any] | None:
    """`topic_route` over the cut's rows; `owned` False: its BrokerDatas are the cut's own objects,
    for a caller that only encodes it (`route_body`). A system topic's route names every broker:
    at 100,000 brokers it took 1.5 s with a deep copy of each, 0.6 s with a copy of each, 0.1 s
    with none (by hand). The acting-master rewrite, the one change to a group, replaces the groups
    it changes by copies either way."""
    queue_datas = snap.topics.get(topic)
    if not queue_datas:
        return None
    brokers = snap.brokers
    broker_datas = [_copied(brokers[q["brokerName"]]) if owned else brokers[q["brokerName"]] for q in queue_datas
                    if q["brokerName"] in brokers]
    if not broker_datas:
        return None
    filter_table: dict[str, list[str]] = {}
    if snap.filters:
        for bd in broker_datas:
            for addr in bd["brokerAddrs"].values():
                servers = snap.filters.get((bd["cluster"], addr))
                if servers is not None:
                    filter_table[addr] = list(servers) if owned else servers
    route: dict[str, Any] = {"brokerDatas": broker_datas, "filterServerTable": filter_table,
                             "queueDatas": [dict(q) for q in queue_datas]}
    if snap.switches["supportActingMaster"] and not topic.startswith(SYNC_BROKER_MEMBER_PREFIX):
        _acting_master_rewrite(route)
    if snap.switches["orderMessageEnable"]:
        conf = snap.kv.get(ev.ORDER_TOPIC_CONFIG, {}).get(topic)
        if conf is not None:
            route["orderTopicConf"] = conf
    if zone:
        _zone_filter(route, zone)
    return route


def _copied(broker_data: dict[str, Any]) -> dict[str, Any]:
    """A BrokerData's copy, its one nested table (brokerAddrs) copied too: `copy.deepcopy`'s
    result at a tenth of its cost."""
    return {**broker_data, "brokerAddrs": dict(broker_data["brokerAddrs"])}


def _decoded_route(body: memoryview | None, zone: str | None) -> dict[str, Any] | None:
    """`topic_route` from the shared file's body: the route before the zone filter, so the filter
    runs here, over the decoded body, as it does over a built one."""
    if body is None:
        return None
    route: dict[str, Any] = json.loads(bytes(body))
    if zone:
        _zone_filter(route, zone)
    return route


def encode_body(value: Any) -> bytes:
    """A response body as every remote answer is encoded here: standard JSON, sorted keys,
    compact, escaped as fastjson2 escapes (RocketMQ 5.4 and later): non-ASCII, DEL, U+2028/2029
    and `/` as they are, control characters as `\b \f \n \r \t` or lower-case `\u001f`. The
    standard library's bytes (`json.dumps(sort_keys=True, ensure_ascii=False)`), written by orjson
    where the two agree (`json_codec.dumps_sorted_utf8`)."""
    return json_codec.dumps_sorted_utf8(value)


def cached_route_body(snap: Snapshot, topic: str) -> bytes | None:
    """The body `route_body` already built for `topic` in this cut, or None; never builds one
    (the HTTP fast path answers only what an earlier lookup made, or, from the shared cut file,
    every topic: the file holds every body)."""
    if snap.cut is not None:  # the shared file holds every topic's body already
        return route_body(snap, topic)
    return snap.route_bodies.get(topic)


def route_body(snap: Snapshot, topic: str) -> bytes | None:
    """The encoded TopicRouteData of `topic` in this cut (standard JSON, sorted keys), or None.

    Built on a topic's first lookup and kept with the cut (RocketMQ's issue #10982 asks for the
    same): a hot topic costs one dict read after that, over HTTP and remoting alike. Misses are
    not kept, so lookups of arbitrary names cannot grow the cache.
    """
    if snap.cut is not None:
        view = snap.cut.route_body(topic)
        return None if view is None else bytes(view)
    body = snap.route_bodies.get(topic)
    if body is None:
        route = _route(snap, topic, None, owned=False)
        if route is None:
            return None
        body = encode_body(route)
        snap.route_bodies[topic] = body
    return body


def route_view(snap: Snapshot, topic: str) -> Body | None:
    """`route_body` without a copy when the cut is the shared file's: the body as a view of the
    mapping, which a writer that takes any bytes-like object (the remoting front) sends as is."""
    return snap.cut.route_body(topic) if snap.cut is not None else route_body(snap, topic)


def _acting_master_rewrite(route: dict[str, Any]) -> None:
    """§6.1.7: a read-only acting-master group shows its smallest-id slave as id 0."""
    if all("0" in bd["brokerAddrs"] for bd in route["brokerDatas"]):
        return
    perms = {q["brokerName"]: q["perm"] for q in route["queueDatas"]}
    datas = route["brokerDatas"]
    for i, bd in enumerate(datas):
        addrs = bd["brokerAddrs"]
        if addrs and "0" not in addrs and bd["enableActingMaster"]:
            perm = perms.get(bd["brokerName"])
            if perm is not None and not perm & fields.PERM_WRITE:
                addrs = dict(addrs)  # the cut's group stays as it is
                addrs["0"] = addrs.pop(min(addrs, key=int))
                datas[i] = {**bd, "brokerAddrs": addrs}


def _zone_filter(route: dict[str, Any], zone: str) -> None:
    """§6.4: keep groups without a master or in the client's zone (case-insensitive)."""
    kept, dropped = [], []
    for bd in route["brokerDatas"]:
        if "0" not in bd["brokerAddrs"] or (bd.get("zoneName") or "").lower() == zone.lower():
            kept.append(bd)
        else:
            dropped.append(bd)
    names = {bd["brokerName"] for bd in dropped}
    route["brokerDatas"] = kept
    route["queueDatas"] = [q for q in route["queueDatas"] if q["brokerName"] not in names]
    for bd in dropped:
        for addr in bd["brokerAddrs"].values():
            route["filterServerTable"].pop(addr, None)


def cluster_info(snap: Snapshot) -> dict[str, Any]:
    """ClusterInfo (§6.3): brokerAddrTable and clusterAddrTable."""
    return {"brokerAddrTable": snap.brokers, "clusterAddrTable": snap.clusters}


CLUSTER_INFO = "clusterInfo"  # cut_bodies key


def cluster_info_body(snap: Snapshot) -> bytes:
    """`cluster_info` encoded, once per cut: a 5.x broker's refreshMetadata asks for it every 5 s,
    and at 1,000 brokers encoding the whole fleet per request was most of the front's CPU."""
    body = snap.cut_bodies.get(CLUSTER_INFO)
    if body is None:
        encoded = bytes(snap.cut.cluster_info_body()) if snap.cut is not None else encode_body(cluster_info(snap))
        body = snap.cut_bodies[CLUSTER_INFO] = encoded
    return body


def cluster_info_view(snap: Snapshot) -> Body:
    """`cluster_info_body`, a view of the shared file's when the cut is served from it (not copied
    into this process: at 10,000 brokers the body is 1.4 MiB)."""
    return snap.cut.cluster_info_body() if snap.cut is not None else cluster_info_body(snap)


# ---------------------------------------------------------------- topic lists (§7.4)

class Disabled(Exception):
    """A topic list switched off by enableAllTopicList/enableTopicList (RocketMQ answers "disable")."""


def all_topics(snap: Snapshot) -> dict[str, Any]:
    if not snap.switches["enableAllTopicList"]:
        raise Disabled
    if snap.cut is not None:
        return {"topicList": list(snap.cut.topic_names())}  # in name order already
    return {"topicList": sorted(snap.topics)}


def topics_by_cluster(snap: Snapshot, cluster: str) -> dict[str, Any]:
    if not snap.switches["enableTopicList"]:
        raise Disabled
    names = set(snap.clusters.get(cluster, []))
    if snap.cut is not None:
        return {"topicList": sorted({topic for name in names for topic in snap.cut.topics_of_group(name)})}
    return {"topicList": sorted(t for t, qds in snap.topics.items() if any(q["brokerName"] in names for q in qds))}


def system_topics(snap: Snapshot) -> dict[str, Any]:
    """Cluster names plus broker names (brokers auto-create topics named after both); not gated."""
    names = set(snap.clusters)
    for brokers in snap.clusters.values():
        names.update(brokers)
    body: dict[str, Any] = {"topicList": sorted(names)}
    for name in sorted(snap.brokers):
        addrs = snap.brokers[name]["brokerAddrs"]
        if addrs:
            body["brokerAddr"] = addrs[min(addrs, key=int)]
            break
    return body


def unit_topics(snap: Snapshot, kind: str) -> dict[str, Any]:
    """311/312/313: RocketMQ tests the flag of the QueueData its per-topic HashMap yields first."""
    if not snap.switches["enableTopicList"]:
        raise Disabled
    unit, sub = 1, 2
    tests = {"unit": lambda f: f & unit, "unit-sub": lambda f: f & sub,
             "unit-sub-ununit": lambda f: f & sub and not f & unit}
    test = tests[kind]
    return {"topicList": sorted(t for t, qds in snap.topics.items() if qds and test(_first_in_hash_order(qds)))}


def _first_in_hash_order(qds: list[dict[str, Any]]) -> int:
    by_name = {q["brokerName"]: q for q in qds}
    return int(by_name[java_hash_order(by_name)[0]]["topicSysFlag"])


def java_hash_order(keys: Iterable[str]) -> list[str]:
    """The order a java.util.HashMap of these String keys iterates in: by bucket, the capacity
    being the default 16 doubled until the keys fit under the 0.75 load factor. Keys sharing a
    bucket come in insertion order in Java, which a cut does not record: here by name."""
    names = list(keys)
    capacity = 16
    while len(names) > capacity * 3 // 4:
        capacity *= 2
    return sorted(names, key=lambda k: (_spread(java_string_hash(k)) & (capacity - 1), k))


def java_string_hash(s: str) -> int:
    """String.hashCode() as an unsigned 32-bit value (over UTF-16 code units)."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h


def _spread(h: int) -> int:
    return h ^ (h >> 16)  # HashMap.hash()


# ---------------------------------------------------------------- brokers

def live_brokers(snap: Snapshot) -> list[dict[str, Any]]:
    return snap.live


def data_version(snap: Snapshot, cluster: str, addr: str, asked: dict[str, int] | None) -> dict[str, Any]:
    """QUERY_DATA_VERSION (§4): changed unless the broker is live with an equal DataVersion."""
    live = snap.live_by_addr.get((cluster, addr))
    stored = None if live is None else json.loads(live["dataVersion"])
    body: dict[str, Any] = {"changed": stored is None or asked is None or stored != asked}
    if stored is not None:
        body["dataVersion"] = stored
    return body


def master_of(snap: Snapshot, broker_name: str, cluster: str | None = None) -> dict[str, Any]:
    """What a slave's registration result carries (§3.2.13): the master, only while it is live
    in the registrant's `cluster` (RocketMQ looks it up there; default: the BrokerData's)."""
    bd = snap.brokers.get(broker_name)
    master = None if bd is None else bd["brokerAddrs"].get("0")
    live = None if bd is None or master is None else snap.live_by_addr.get((cluster or bd["cluster"], master))
    if live is None:
        return {"masterAddr": None, "haServerAddr": None}
    return {"masterAddr": master, "haServerAddr": live["haServerAddr"]}


def holder_of(snap: Snapshot, cluster: str, addr: str) -> tuple[str, int] | None:
    """(brokerName, brokerId) under which a BrokerData of `cluster` holds `addr`, as RocketMQ's
    setupUnRegisterRequest finds it for a closed channel (the smallest brokerName if several, the
    smallest brokerId within it). Indexed once per cut: a fleet's connections closing together
    each ask."""
    if not snap.holders and snap.brokers:
        index: dict[tuple[str, str], tuple[str, int]] = {}
        for name, bd in sorted(snap.brokers.items()):
            for bid, a in bd["brokerAddrs"].items():
                index.setdefault((bd["cluster"], a), (name, int(bid)))
        snap.holders.update(index)  # whole at once: a racing reader sees it empty (and builds) or whole
    return snap.holders.get((cluster, addr))


def member_group(snap: Snapshot, cluster: str | None, broker_name: str | None) -> dict[str, Any]:
    """GET_BROKER_MEMBER_GROUP (§7.5): the cluster is echoed, unknown brokers give no addresses;
    a name the request left out is left out of the answer (Java's null field)."""
    bd = snap.brokers.get(broker_name) if broker_name is not None else None
    group = {"cluster": cluster, "brokerName": broker_name, "brokerAddrs": dict(bd["brokerAddrs"]) if bd else {}}
    return {"brokerMemberGroup": {k: v for k, v in group.items() if v is not None}}


def topics_hosted_by(snap: Snapshot, broker_name: str) -> int:
    """The wipe/add write-perm count: topics with a QueueData of this broker (§7.1)."""
    if snap.cut is not None:
        return len(snap.cut.topics_of_group(broker_name))
    return sum(1 for qds in snap.topics.values() if any(q["brokerName"] == broker_name for q in qds))


# ---------------------------------------------------------------- history

def diff(before: Snapshot, after: Snapshot) -> dict[str, Any]:
    """The topology difference between two cuts: topics (queue data), brokers (BrokerData),
    cluster membership, KV and switches; each as added / removed / changed."""
    def compare(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
        return {"added": {k: b[k] for k in sorted(b.keys() - a.keys())},
                "removed": {k: a[k] for k in sorted(a.keys() - b.keys())},
                "changed": {k: {"before": a[k], "after": b[k]} for k in sorted(a.keys() & b.keys()) if a[k] != b[k]}}

    return {
        "from": {"snapshotId": before.snapshot_id, "commitTime": before.commit_time},
        "to": {"snapshotId": after.snapshot_id, "commitTime": after.commit_time},
        "topics": compare(before.topics, after.topics),
        "brokers": compare(before.brokers, after.brokers),
        "clusters": compare(before.clusters, after.clusters),
        "kv": compare(before.kv, after.kv),
        "config": compare(before.switches, after.switches),
    }
