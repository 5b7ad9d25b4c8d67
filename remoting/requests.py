"""Write requests as events (pure): what a broker or mqadmin asked for, in the event contract.

Broker requests (103, 104, 322, 904) become REGISTER_BROKER / UNREGISTER_BROKER /
BROKER_HEARTBEAT stamped with the time the front received them: RocketMQ measures liveness on
the NameServer's clock, not the broker's. Admin requests become the same events the HTTP admin
API publishes, with the same strict name rules. Every event is validated by the contract's own
parser before it is published, so a bad request is answered with its reason instead of
becoming a dead letter.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from liveness import fingerprint as liveness_fingerprint
from remoting import bodies, codes
from remoting.protocol import Command
from routeinfo import admin_fanout, route_reads, route_writes
from routeinfo.snapshot import Snapshot
from schemas import events as ev
from schemas import fields
from schemas.fields import MASTER_ID, InvalidInput

# The contract's per-record limit does not apply here: a large registration is chunked by the
# publisher; validation only needs to see the whole event once.
_NO_LIMIT = 2**62


def _long(ext: Mapping[str, str], name: str, *, required: bool = True) -> int | None:
    """Java's lenient header decoding: a Long field that is absent or does not parse is null."""
    raw = ext.get(name)
    if raw is None or raw == "":
        if required:
            raise InvalidInput(f"missing required header field '{name}'")
        return None
    try:
        return int(raw)
    except ValueError:
        raise InvalidInput(f"header field {name}={raw[:40]!r} is not an integer") from None


def _bool(ext: Mapping[str, str], name: str) -> bool | None:
    raw = ext.get(name)
    return None if raw is None else raw.strip().lower() == "true"


def validated(event: dict[str, Any], now_ms: int) -> dict[str, Any]:
    """`event` if the contract accepts it; InvalidInput with the dead-letter reason otherwise."""
    _record(event, now_ms)
    return event


def _record(event: dict[str, Any], now_ms: int) -> tuple[bytes, bytes]:
    """The event's record, (key, value), if the contract's parser accepts it as the job will."""
    key, value = ev.encode(event)
    ev.parse_event(value, key=key.decode(), record_time_ms=now_ms, max_message_bytes=_NO_LIMIT,
                   max_clock_skew_ms=_NO_LIMIT)
    return key, value


def fingerprint(cmd: Command) -> bytes:
    """What identifies a request's content: its header fields, version and body. A broker with
    default settings re-sends the same REGISTER_BROKER every 30 s; one equal to a registration
    already accepted (the front compares per connection and address) is accepted again without
    being validated again, since validation reads nothing but these and the time it stamps."""
    return liveness_fingerprint.of_request(cmd.ext, cmd.version, cmd.body)


def registration(cmd: Command, now_ms: int, *, validate: bool = True,
                 fingerprinted: bytes | None = None) -> ev.Fingerprinted:
    """103 as REGISTER_BROKER, with its request's fingerprint (`fingerprinted`, or computed) and,
    validated, its record. Raises InvalidInput, or bodies.BodyError for a body that fails its CRC
    (0 or absent: not checked, as in RocketMQ) or does not decode. `validate` False: the same
    request (`fingerprint`) was accepted before; the contract's parser is not run again."""
    ext = cmd.ext
    if cmd.version < 0:  # RocketMQ looks the version up in MQVersion first, and fails (SYSTEM_ERROR)
        raise InvalidInput(f"version {cmd.version} is not an MQVersion ordinal")
    crc = _long(ext, "bodyCrc32", required=False)
    if crc is not None and not -2**31 <= crc < 2**31:
        crc = None  # an Integer header field: Java reads text beyond int's range as null (no check)
    if crc and bodies.crc32(cmd.body) != crc:
        raise bodies.BodyError("crc32 not match")  # RocketMQ's remark
    reg = bodies.decode_registration(cmd.body, version=cmd.version, compressed=_bool(ext, "compressed") or False)
    event = ev.register_broker_event(
        cluster=ext.get("clusterName") or "", broker_name=ext.get("brokerName") or "",
        broker_id=_long(ext, "brokerId") or 0, addr=ext.get("brokerAddr") or "",
        ha_addr=ext.get("haServerAddr") or None, topics=reg.topics, data_version=reg.data_version,
        timeout_ms=_long(ext, "heartbeatTimeoutMillis", required=False),
        enable_acting_master=_bool(ext, "enableActingMaster"), zone=ext.get("__ZONE_NAME") or None,
        filter_servers=reg.filter_servers, timestamp=now_ms)
    return ev.Fingerprinted(event, fingerprint(cmd) if fingerprinted is None else fingerprinted,
                            _record(event, now_ms) if validate else ev.encode(event))


def to_publish(event: ev.Fingerprinted, max_message_bytes: int) -> ev.Fingerprinted:
    """What the publisher needs of a registration whose record is made and fits one message: the
    record, and the event's fields but its topic table (its type and fingerprint make the headers).
    A registration waits in the publishing queue while a wave arrives faster than Kafka takes it,
    and the decoded topic table of 100 topics is several times its record's bytes: in a 10,000 x
    100 wave the front's PSS peaked at 471 MiB with the tables queued. One that must be chunked
    keeps its table (the chunks are made from it)."""
    if event.record is None or len(event.record[1]) > max_message_bytes:
        return event
    return ev.Fingerprinted({k: v for k, v in event.items() if k != "topicConfigTable"}, event.fingerprint,
                            event.record)


def single_topic_of_unknown(snap: Snapshot, event: dict[str, Any]) -> bool:
    """The job's §3.2.7 guard, judged against the served cut, so the broker hears "register
    broker failed" as from RocketMQ."""
    bd = snap.brokers.get(event["brokerName"])
    return route_writes.creates_broker_from_one_topic({int(i) for i in bd["brokerAddrs"]} if bd else set(), event)


def stale_epoch(snap: Snapshot, event: dict[str, Any]) -> bool:
    """The job's §3.2.6 refusal, judged against the served cut: another address holds the id
    with a newer epoch in the registrant's cluster (RocketMQ then answers an empty result)."""
    bd = snap.brokers.get(event["brokerName"])
    holder = None if bd is None else bd["brokerAddrs"].get(str(event["brokerId"]))
    live = None if holder is None else snap.live_by_addr.get((event["clusterName"], holder))
    held = None if live is None else json.loads(live["dataVersion"])["stateVersion"]
    return route_writes.outranked_by(holder, held, event)


def shown_by(snap: Snapshot, event: dict[str, Any], *, prune: bool) -> bool:
    """Whether the served cut already shows all a REGISTER_BROKER would make visible, so that its
    answer need not wait for the job (RocketMQ's answer means the change is visible to the next
    lookup). Shown: what `header_shown_by` checks, and every topic of the config under this
    group. With the same data version the rules add only missing topic names; `prune`
    (deleteTopicWithBrokerRegistration) may also drop topics, which the cut cannot rule out
    cheaply, so such a registration waits."""
    if prune or not header_shown_by(snap, event):
        return False
    return topics_shown_by(snap, event["brokerName"], event["topicConfigTable"])


def topics_shown_by(snap: Snapshot, broker_name: str, topics: Iterable[str]) -> bool:
    """Whether every one of `topics` has a queue row of this group in the cut."""
    if snap.cut is not None:  # the file's per-group section: no route body decoded per topic
        return set(topics).issubset(snap.cut.topics_of_group(broker_name))
    return all(any(q["brokerName"] == broker_name for q in snap.topics.get(topic, ())) for topic in topics)


def repeat_shown_by(snap: Snapshot, repeat: dict[str, Any], *, prune: bool) -> bool:
    """`shown_by` for a repeat published small (schemas.events.repeated_registration_event: the
    registration's header and the digest of its topic names): whose topic table counts (the
    master's, or a group without one: a prime slave's) must name exactly the group's topics in
    the cut, or the rules would add some."""
    if prune or not header_shown_by(snap, repeat):
        return False
    bd = snap.brokers[repeat["brokerName"]]
    if repeat["brokerId"] != MASTER_ID and str(MASTER_ID) in bd["brokerAddrs"]:
        return True  # a slave's topics are not applied while the group has a master
    return bool(snap.topics.topic_keys_of(repeat["brokerName"]) == repeat["repeats"]["topicKeys"])


def header_shown_by(snap: Snapshot, event: dict[str, Any]) -> bool:
    """The cut shows a registration's header: the address under its id in its group and
    cluster, the group's flags, the live entry's data version, HA address and timeout, and the
    filter servers."""
    cluster, name, addr = event["clusterName"], event["brokerName"], event["brokerAddr"]
    bd = snap.brokers.get(name)
    if bd is None or bd["cluster"] != cluster or bd["brokerAddrs"].get(str(event["brokerId"])) != addr:
        return False
    acting = event["enableActingMaster"] is not None and bool(event["enableActingMaster"])
    if (bd["enableActingMaster"], bd.get("zoneName")) != (acting, event.get("zoneName")):
        return False
    if (cluster, name) not in snap.members:
        return False
    live = snap.live_by_addr.get((cluster, addr))
    if (live is None or live["haServerAddr"] != event.get("haServerAddr")
            or json.loads(live["dataVersion"]) != event["dataVersion"]):
        return False
    timeout, servers = event.get("heartbeatTimeoutMillis"), event.get("filterServerList")
    if timeout is not None and live["heartbeatTimeoutMillis"] != timeout:
        return False
    return servers is None or snap.filters.get((cluster, addr), []) == list(servers)  # absent: untouched


def unregistration(cmd: Command, now_ms: int) -> dict[str, Any]:
    ext = cmd.ext
    return validated(ev.unregister_broker_event(
        cluster=ext.get("clusterName") or "", broker_name=ext.get("brokerName") or "",
        broker_id=_long(ext, "brokerId") or 0, addr=ext.get("brokerAddr") or "", timestamp=now_ms), now_ms)


# Strict or lenient, decided once, by what a request stores (docs/semantics.md §15.5). A request
# that stores names (REGISTER_BROKER, UNREGISTER_BROKER, the admin writes) is strict: a name
# RocketMQ's clients could never ask for is refused with SYSTEM_ERROR and its reason, and nothing
# is published. A request that only looks up what is stored (the reads, and these liveness
# signals, which refresh a live entry they find and store nothing) is lenient: a missing, empty,
# odd or undecodable name finds nothing, as in RocketMQ, and it is answered as RocketMQ answers.
LENIENT_SIGNALS = frozenset({codes.BROKER_HEARTBEAT, codes.QUERY_DATA_VERSION})
_NPE = ('java.lang.NullPointerException: Cannot invoke "String.length()" because "this.{}" is null, '
        'org.apache.rocketmq.namesrv.routeinfo.BrokerAddrInfo.hashCode(RouteInfoManager.java:1161)')  # 5.5.0's words


def heartbeat(cmd: Command, now_ms: int, snap: Snapshot) -> dict[str, Any] | None:
    """904 (clusterName, brokerAddr, brokerName; no brokerId) or 322 (with brokerId and a DataVersion
    body) as the liveness signal to forward, or None: nothing to refresh. Lenient (LENIENT_SIGNALS):
    RocketMQ refreshes the live entry of (clusterName, brokerAddr) if there is one and reads no other
    field, so a request whose fields fail the contract refreshes the group holding that address in
    the served cut, or nothing. Only such a request pays for the second look. Without clusterName or
    brokerAddr RocketMQ's lookup fails (its BrokerAddrInfo hashes both): SYSTEM_ERROR with its text."""
    ext = cmd.ext
    cluster, addr = ext.get("clusterName"), ext.get("brokerAddr")
    if cluster is None or addr is None:
        raise InvalidInput(_NPE.format("clusterName" if cluster is None else "brokerAddr"))
    try:
        return validated(ev.heartbeat_event(cluster=cluster, broker_name=ext.get("brokerName") or "",
                                            broker_id=_long(ext, "brokerId", required=False), addr=addr,
                                            timestamp=now_ms), now_ms)
    except InvalidInput:
        pass
    holder = route_reads.holder_of(snap, cluster, addr)
    if holder is None:
        return None
    try:
        return validated(ev.heartbeat_event(cluster=cluster, broker_name=holder[0], broker_id=None, addr=addr,
                                            timestamp=now_ms), now_ms)
    except InvalidInput:
        return None


# ---------------------------------------------------------------- admin writes (strict names)

def put_kv(ext: Mapping[str, str]) -> dict[str, Any]:
    ns, key = ext.get("namespace"), ext.get("key")
    if ns is None or key is None:
        raise InvalidInput("namespace or key is null")  # RocketMQ's remark
    if ext.get("value") is None:  # RocketMQ stores a null no read returns; refused (docs/semantics.md §15.5)
        raise InvalidInput("value is null")
    return validated(ev.put_kv_event(fields.validate_name(ns, "namespace"), key, ext["value"]), 0)


def delete_kv(ext: Mapping[str, str]) -> list[dict[str, Any]]:
    """102. Without a namespace or key nothing can match: RocketMQ answers SUCCESS (only 100
    checks for null), and so do we, publishing nothing."""
    ns, key = ext.get("namespace"), ext.get("key")
    if ns is None or key is None:
        return []
    return [validated(ev.delete_kv_event(fields.validate_name(ns, "namespace"), key), 0)]


def write_perm(ext: Mapping[str, str], *, wipe: bool) -> dict[str, Any]:
    name = fields.validate_name(ext.get("brokerName"), "brokerName")
    return ev.wipe_write_perm_event(name) if wipe else ev.add_write_perm_event(name)


def delete_topic(snap: Snapshot, ext: Mapping[str, str]) -> list[dict[str, Any]]:
    """216: any name a broker could have registered may be deleted; the cluster is optional."""
    topic = fields.validate_broker_topic(ext.get("topic"), "topic")
    cluster = ext.get("clusterName") or None
    if cluster is not None:
        fields.validate_name(cluster, "clusterName")
    return [validated(e, 0) for e in admin_fanout.delete_topic(snap, topic, cluster)]


def register_topic(snap: Snapshot, ext: Mapping[str, str], body: bytes) -> list[dict[str, Any]]:
    """217: TopicRouteData's queueDatas, names checked as strictly as over HTTP."""
    topic = fields.validate_topic(ext.get("topic"))
    queue_datas = [{"brokerName": fields.validate_name(q.get("brokerName"), f"queueDatas[{i}].brokerName"),
                    **fields.queue_fields(q, f"queueDatas[{i}]")} for i, q in enumerate(bodies.queue_datas(body))]
    return [validated(e, 0) for e in admin_fanout.register_topic(snap, topic, queue_datas)]


class NotAllowed(Exception):
    """318 named a key outside the allow-list (NO_PERMISSION)."""


def update_config(body: bytes) -> list[dict[str, Any]]:
    """318: allow-listed switches only; any other key refuses the whole request."""
    if not body:
        return []
    props = bodies.parse_properties(body.decode("latin-1"))  # Properties.load reads ISO-8859-1
    refused = sorted(k for k in props if k not in ev.RUNTIME_SWITCHES)
    if refused:
        raise NotAllowed(f"Can not update config {', '.join(refused)[:200]}: only the runtime switches "
                         f"{', '.join(sorted(ev.RUNTIME_SWITCHES))} may be changed")
    return [ev.update_config_event(k, ev.validate_switch(k, v)) for k, v in sorted(props.items())]
