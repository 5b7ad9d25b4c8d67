"""Read requests answered from a served cut (pure): the same read model as HTTP, RocketMQ's bodies.

Each function takes the snapshot and the request's extFields and returns a `Reply`; none of
them has its own rule: `routeinfo.route_reads` decides, this module only encodes it the way
a Java NameServer's DefaultRequestProcessor/ClientRequestProcessor would.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from remoting import codes
from remoting.bodies import format_properties
from routeinfo import kv_manager, route_reads
from routeinfo.snapshot import Snapshot
from schemas import events as ev


@dataclass(frozen=True)
class Reply:
    code: int
    remark: str | None = None
    ext: dict[str, str] | None = None  # None: no extFields key at all (createResponseCommand(null))
    body: route_reads.Body = b""  # a view of the shared cut file for the cut's own bodies


# extFields key naming the cut a read was answered from (RocketMQ's clients ignore keys they do not
# decode); lets answers of several fronts be compared (serving replicas).
SNAPSHOT_EXT = "namesrvSnapshotId"


def stamped(reply: Reply, snap: Snapshot) -> Reply:
    return Reply(reply.code, reply.remark, {**(reply.ext or {}), SNAPSHOT_EXT: str(snap.snapshot_id)}, reply.body)


def ok(body: Any = None, *, ext: dict[str, str] | None = None) -> Reply:
    data = b"" if body is None else body if isinstance(body, (bytes, memoryview)) else route_reads.encode_body(body)
    return Reply(codes.SUCCESS, ext=ext, body=data)


def error(code: int, remark: str) -> Reply:
    return Reply(code, remark=remark)


def get_route(snap: Snapshot, ext: Mapping[str, str]) -> Reply:
    """105: the route (standard JSON: quoted keys, which every Java client parses), or 17. The
    file's body as is; with the client's zone, that body decoded, filtered and encoded again."""
    topic = ext.get("topic") or ""
    zone = ext.get("__ZONE_NAME") if (ext.get("__ZONE_MODE") or "").lower() == "true" else None
    body: route_reads.Body | None
    if zone:
        route = route_reads.topic_route(snap, topic, zone=zone)
        body = None if route is None else route_reads.encode_body(route)
    else:
        body = route_reads.route_view(snap, topic)
    if body is None:
        return error(codes.TOPIC_NOT_EXIST, codes.topic_not_exist(topic))
    return ok(body)


def cluster_info(snap: Snapshot, ext: Mapping[str, str]) -> Reply:
    return ok(route_reads.cluster_info_view(snap))


def _listed(build: Callable[[], dict[str, Any]]) -> Reply:
    try:
        return ok(build())
    except route_reads.Disabled:
        return error(codes.SYSTEM_ERROR, "disable")


def all_topics(snap: Snapshot, ext: Mapping[str, str]) -> Reply:
    return _listed(lambda: route_reads.all_topics(snap))


def topics_by_cluster(snap: Snapshot, ext: Mapping[str, str]) -> Reply:
    return _listed(lambda: route_reads.topics_by_cluster(snap, ext.get("cluster") or ""))


def system_topics(snap: Snapshot, ext: Mapping[str, str]) -> Reply:
    return ok(route_reads.system_topics(snap))


def _unit(kind: str) -> Callable[[Snapshot, Mapping[str, str]], Reply]:
    return lambda snap, ext: _listed(lambda: route_reads.unit_topics(snap, kind))


def kv_value(snap: Snapshot, ext: Mapping[str, str]) -> Reply:
    try:
        return ok(ext={"value": kv_manager.read_value(snap.kv, ext.get("namespace"), ext.get("key"))})
    except kv_manager.KvNotFound as exc:
        return error(codes.QUERY_NOT_FOUND, str(exc))


def kv_namespace(snap: Snapshot, ext: Mapping[str, str]) -> Reply:
    try:
        return ok({"table": kv_manager.read_namespace(snap.kv, ext.get("namespace"))})
    except kv_manager.KvNotFound as exc:
        return error(codes.QUERY_NOT_FOUND, str(exc))


def member_group(snap: Snapshot, ext: Mapping[str, str]) -> Reply:
    """901. RocketMQ sets the code but never clears createResponseCommand's placeholder remark."""
    body = route_reads.member_group(snap, ext.get("clusterName"), ext.get("brokerName"))
    return Reply(codes.SUCCESS, remark=codes.NOT_SET_REMARK, body=route_reads.encode_body(body))


def namesrv_config(snap: Snapshot, read_only: Mapping[str, str]) -> Reply:
    """319: the runtime switches and read-only facts as `key=value` lines (never an empty body)."""
    values = {k: "true" if v else "false" for k, v in snap.switches.items()}
    values.update(read_only)
    return ok(format_properties(values))


def data_version(snap: Snapshot, ext: Mapping[str, str], asked: dict[str, int] | None) -> Reply:
    """322's answer: `changed`, and the stored DataVersion while the broker is live."""
    answer = route_reads.data_version(snap, ext.get("clusterName") or "", ext.get("brokerAddr") or "", asked)
    stored = answer.get("dataVersion")
    return ok(None if stored is None else stored, ext={"changed": "true" if answer["changed"] else "false"})


def order_topic_config(snap: Snapshot) -> bytes:
    """REGISTER_BROKER's answer body: the ORDER_TOPIC_CONFIG namespace as a KVTable, if it exists."""
    table = snap.kv.get(ev.ORDER_TOPIC_CONFIG)
    return b"" if table is None else route_reads.encode_body({"table": table})


READS: dict[int, Callable[[Snapshot, Mapping[str, str]], Reply]] = {
    codes.GET_KV_CONFIG: kv_value,
    codes.GET_ROUTEINFO_BY_TOPIC: get_route,
    codes.GET_BROKER_CLUSTER_INFO: cluster_info,
    codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: all_topics,
    codes.GET_KVLIST_BY_NAMESPACE: kv_namespace,
    codes.GET_TOPICS_BY_CLUSTER: topics_by_cluster,
    codes.GET_SYSTEM_TOPIC_LIST_FROM_NS: system_topics,
    codes.GET_UNIT_TOPIC_LIST: _unit("unit"),
    codes.GET_HAS_UNIT_SUB_TOPIC_LIST: _unit("unit-sub"),
    codes.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: _unit("unit-sub-ununit"),
    codes.GET_BROKER_MEMBER_GROUP: member_group,
}
