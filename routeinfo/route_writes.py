"""RouteInfoManager's write rules, one handler per request, over one broker group's state.

Each handler mutates the group's `GroupState` and records in `Result` which tables changed
and which topology changes happened (the `route_changes` audit log). `route_manager.apply`
calls them in Kafka order; expiry lives in `housekeeping`. No I/O, no Spark, no wall clock:
replaying a batch gives the same result, which the sink's idempotency relies on.

Deliberate differences from RocketMQ (§15): a refused registration that would leave an empty
BrokerData (a new group, or its only address moving to the refused id) changes nothing, and a
live entry whose address left brokerAddrs is still expired. Otherwise refused registrations have
RocketMQ's effects: what ran before its checks and, for a stale epoch, the removal of the
refused address's live entry.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass, field
from typing import Any

from routeinfo.state import BrokerData, GroupState, LiveInfo, PendingRegistration, topic_keys_digest
from schemas import events as ev
from schemas import tables as t
from schemas.fields import DEFAULT_PERM, MASTER_ID, PERM_WRITE


@dataclass(frozen=True)
class RoutingConfig:
    """The job's settings that the rules read (built from `conf.Config` at the job's entry point)."""

    default_timeout_ms: int
    delete_topic_with_broker_registration: bool
    # Heartbeats move lastUpdateTimestamp only in the state store; broker_live is rewritten with
    # the fresh values when something else changes, or once per `live_flush_ms` window (aligned
    # for all groups, so a quiet fleet adds one broker_live version per window, not per batch).
    # 0 = materialize every heartbeat.
    live_flush_ms: int


@dataclass
class Result:
    """What one `apply` call did: tables whose rows changed, topology changes for the audit
    log (`route_changes`), and notable outcomes for the job's log."""

    dirty_tables: set[str] = field(default_factory=set)
    rejected: list[str] = field(default_factory=list)
    expired: list[tuple[str, str]] = field(default_factory=list)
    perm_topic_counts: list[int] = field(default_factory=list)  # wipe/add write-perm answers, in event order
    changes: list[dict[str, Any]] = field(default_factory=list)
    event_index: int | None = None  # which input event the changes being recorded come from
    time: int = 0                   # the instant they happen at (event time, or now for expiry)

    def change(self, kind: str, *, cluster: str | None = None, addr: str | None = None,
               broker_id: int | None = None, topic: str | None = None, before: Any = None, after: Any = None) -> None:
        self.changes.append({"kind": kind, "clusterName": cluster, "brokerAddr": addr, "brokerId": broker_id,
                             "topic": topic, "before": before, "after": after, "eventIndex": self.event_index,
                             "time": self.time})


class Rejected(Exception):
    """RocketMQ's rules refuse this request; the message is the reason logged and audited."""


class NeedsBody(Exception):
    """A repeated registration (`repeats`) whose topic table the rules need: the address is new
    to the group or lost its live entry (an expiry, an unregistration), its data version moved, or
    the group's topic names differ from the registration's (an admin write came between). The
    caller reads the registration it repeats from the log (`offsets`, in the partition of the
    record at `log_offset`) and runs the group again with it; the group's state is not kept."""

    def __init__(self, e: Mapping[str, Any]) -> None:
        self.log_offset: int = e.get("logOffset", -1)
        self.offsets: list[int] = e["repeats"]["offsets"]
        self.topic_keys: str = e["repeats"]["topicKeys"]
        super().__init__(f"the repeated registration at offset {self.log_offset} needs the body at {self.offsets}")


Handler = Callable[[GroupState, dict[str, Any], RoutingConfig, Result], None]


# ---------------------------------------------------------------- queue data primitives

def put_queue(st: GroupState, topic: str, qd: dict[str, int], res: Result) -> None:
    before = st.topics.get(topic)
    if before == qd:
        return
    st.topics[topic] = qd
    res.dirty_tables.add(t.TOPIC_QUEUE.name)
    res.change("QUEUE_ADDED" if before is None else "QUEUE_CHANGED", topic=topic, before=before, after=dict(qd))


def drop_queue(st: GroupState, topic: str, res: Result, kind: str) -> None:
    before = st.topics.pop(topic, None)
    if before is not None:
        res.dirty_tables.add(t.TOPIC_QUEUE.name)
        res.change(kind, topic=topic, before=before)


def set_perm(st: GroupState, topic: str, perm: int, res: Result, kind: str) -> None:
    qd = st.topics[topic]
    if qd["perm"] != perm:
        res.change(kind, topic=topic, before=dict(qd), after={**qd, "perm": perm})
        qd["perm"] = perm
        res.dirty_tables.add(t.TOPIC_QUEUE.name)


# ---------------------------------------------------------------- REGISTER_BROKER (§3.2)

def register_broker(st: GroupState, e: dict[str, Any], cfg: RoutingConfig, res: Result) -> None:
    """Every REGISTER_BROKER: a plain one applies at once, a chunked one once all its chunks are in."""
    if e.get("chunk") is None:
        _register(st, e, cfg, res)
        return
    whole = _collect_chunk(st, e, res)
    if whole is not None:
        _register(st, whole, cfg, res)


def _register(st: GroupState, e: dict[str, Any], cfg: RoutingConfig, res: Result) -> None:
    """§3.2. A stale epoch is refused after RocketMQ's earlier steps, with its effects; the
    single-topic guard refuses before anything changes."""
    if e["topicConfigTable"] is None and (st.broker is None or e["brokerId"] not in st.broker.addrs):
        # a repeat of an id the group does not hold: the single-topic guard and a first
        # registration both read the topic table
        raise NeedsBody(e)
    stale = _stale_epoch(st, e)
    if stale is not None:
        _effects_before_refusal(st, e, res)
        # RocketMQ: "Remove the rejected brokerAddr from brokerLiveTable", so it answers changed=true
        # until its epoch catches up
        if st.live.pop((e["clusterName"], e["brokerAddr"]), None) is not None:
            res.dirty_tables.add(t.BROKER_LIVE.name)
        raise Rejected(stale)
    if creates_broker_from_one_topic(st.broker.addrs if st.broker is not None else {}, e):
        _effects_before_refusal(st, e, res)
        raise Rejected(f"register broker failed: single-topic registration of unknown "
                       f"{st.broker_name}/{e['brokerId']} ({e['brokerAddr']})")
    first = _upsert_broker(st, e, res)
    _apply_topic_configs(st, e, cfg, res, register_first=first)
    _refresh_live(st, e, cfg, res)
    _update_filters(st, e, res)


def creates_broker_from_one_topic(known_ids: Container[Any], e: Mapping[str, Any]) -> bool:
    """§3.2.7: an incremental one-topic registration must not create a broker (RocketMQ answers
    "register broker failed"); `known_ids` are the ids the group's BrokerData holds."""
    table = e["topicConfigTable"]
    return table is not None and e["brokerId"] not in known_ids and len(table) == 1


def outranked_by(holder_addr: str | None, holder_state_version: int | None, e: Mapping[str, Any]) -> bool:
    """§3.2.6 (controller mode): the id's current holder (address, and its live stateVersion in the
    registrant's cluster, None if not live) is another address with a newer epoch. Used by the job
    on its state and by the remoting front on the served cut."""
    return (holder_addr is not None and holder_addr != e["brokerAddr"] and holder_state_version is not None
            and holder_state_version > e["dataVersion"]["stateVersion"])


def _stale_epoch(st: GroupState, e: dict[str, Any]) -> str | None:
    """Why this registration is stale (`outranked_by`), or None."""
    old_addr = st.broker.addrs.get(e["brokerId"]) if st.broker is not None else None
    holder = None if old_addr is None else st.live.get((e["clusterName"], old_addr))
    held = None if holder is None else holder.data_version["stateVersion"]
    if not outranked_by(old_addr, held, e):
        return None
    return (f"stale registration of {e['brokerAddr']} as {st.broker_name}/{e['brokerId']}: "
            f"stateVersion {e['dataVersion']['stateVersion']} < {held} of {old_addr}")


def _effects_before_refusal(st: GroupState, e: dict[str, Any], res: Result) -> None:
    """What RocketMQ has done to an existing group by the time it refuses a registration (stale
    epoch, single-topic guard): the cluster lists the brokerName, the group takes the
    registration's acting-master flag and zone, and the address leaves its other ids. Nothing
    when the group does not exist or the removal would empty it: RocketMQ then keeps an empty
    BrokerData, which a cut cannot hold (a documented difference)."""
    broker = st.broker
    cluster, addr, bid = e["clusterName"], e["brokerAddr"], e["brokerId"]
    if broker is None:
        return
    moved = [i for i, a in broker.addrs.items() if a == addr and i != bid]
    if len(moved) == len(broker.addrs):
        return
    _join_cluster(st, cluster, res)
    _set_flags(broker, e, res, force=False)
    for other in moved:
        del broker.addrs[other]
        res.dirty_tables.add(t.BROKER_ADDR.name)
        res.change("BROKER_UNREGISTERED", cluster=cluster, addr=addr, broker_id=other, before=addr,
                   after="refused registration")


def _join_cluster(st: GroupState, cluster: str, res: Result) -> None:
    if cluster not in st.clusters:
        st.clusters.add(cluster)
        res.dirty_tables.add(t.CLUSTER_ADDR.name)
        res.change("CLUSTER_JOINED", cluster=cluster)


def _set_flags(broker: BrokerData, e: dict[str, Any], res: Result, *, force: bool) -> None:
    """enableActingMaster (absent: a 4.x broker, false) and the zone, overwritten by every registration."""
    acting = e["enableActingMaster"] is not None and bool(e["enableActingMaster"])
    if (broker.enable_acting_master, broker.zone_name) != (acting, e["zoneName"]) or force:
        broker.enable_acting_master, broker.zone_name = acting, e["zoneName"]
        res.dirty_tables.add(t.BROKER_ADDR.name)


def _upsert_broker(st: GroupState, e: dict[str, Any], res: Result) -> bool:
    """Cluster membership and BrokerData (§3.2.5 master/slave switch included).

    Returns whether this counts as the address's first registration (its topic configs then
    apply in full)."""
    cluster, addr, bid = e["clusterName"], e["brokerAddr"], e["brokerId"]
    _join_cluster(st, cluster, res)
    register_first = False
    if st.broker is None:
        st.broker = BrokerData(cluster=cluster)
        register_first = True
    broker = st.broker
    _set_flags(broker, e, res, force=register_first)

    # §3.2.5: one ip:port holds one id inside a group.
    moved_from = [i for i, a in broker.addrs.items() if a == addr and i != bid]
    for other in moved_from:
        del broker.addrs[other]
        res.dirty_tables.add(t.BROKER_ADDR.name)
        res.change("ADDRESS_ID_CHANGED", cluster=broker.cluster, addr=addr, broker_id=bid, before=other, after=bid)
    previous = broker.addrs.get(bid)
    if previous != addr:
        broker.addrs[bid] = addr
        res.dirty_tables.add(t.BROKER_ADDR.name)
        if not moved_from:
            res.change("BROKER_REGISTERED", cluster=cluster, addr=addr, broker_id=bid, before=previous, after=addr)
    return register_first or not previous


def _apply_topic_configs(st: GroupState, e: dict[str, Any], cfg: RoutingConfig, res: Result, *,
                         register_first: bool) -> None:
    """§3.2.9-10: whose topic config counts (the master, or the prime slave of a 5.x group),
    and which topics change."""
    assert st.broker is not None  # _upsert_broker ran
    broker, bid = st.broker, e["brokerId"]
    is_old_broker = e["enableActingMaster"] is None  # a 4.x broker does not send the field
    is_master = bid == MASTER_ID
    is_prime_slave = not is_old_broker and not is_master and bid == min(broker.addrs)
    if not (is_master or is_prime_slave):
        return
    prev_live = st.live.get((e["clusterName"], e["brokerAddr"]))
    dv_changed = prev_live is None or prev_live.data_version != e["dataVersion"]
    incoming = e["topicConfigTable"]
    keys = e["repeats"]["topicKeys"] if incoming is None else topic_keys_digest(incoming)
    if not (register_first or dv_changed) and keys == st.topic_keys_digest():
        return  # same version, same topic names: nothing to add or drop (topic table stays encoded)
    if incoming is None:
        raise NeedsBody(e)
    if cfg.delete_topic_with_broker_registration:
        for topic in [x for x in st.topics if x not in incoming]:
            drop_queue(st, topic, res, "QUEUE_REMOVED")
    for topic, tc in sorted(incoming.items()):
        if register_first or dv_changed or topic not in st.topics:
            perm = tc["perm"]
            if is_prime_slave and broker.enable_acting_master:
                perm &= ~PERM_WRITE
            put_queue(st, topic, {"readQueueNums": tc["readQueueNums"], "writeQueueNums": tc["writeQueueNums"],
                                  "perm": perm, "topicSysFlag": tc["topicSysFlag"]}, res)


def _refresh_live(st: GroupState, e: dict[str, Any], cfg: RoutingConfig, res: Result) -> None:
    """§3.2.11 the live table. A re-registration that only moves lastUpdateTimestamp is treated
    like a heartbeat for materialization (brokers re-register every 30 s)."""
    key = (e["clusterName"], e["brokerAddr"])
    prev = st.live.get(key)
    # RocketMQ stamps the entry with its clock at receipt, which only moves forward
    live = LiveInfo(broker_id=e["brokerId"], last_update=e["time"] if prev is None else max(prev.last_update, e["time"]),
                    timeout_ms=cfg.default_timeout_ms if e["heartbeatTimeoutMillis"] is None
                    else e["heartbeatTimeoutMillis"],
                    data_version=dict(e["dataVersion"]), ha_server_addr=e["haServerAddr"],
                    registered_offset=max(_registration_offset(e), -1 if prev is None else prev.registered_offset))
    if prev is not None and (prev.broker_id, prev.timeout_ms, prev.data_version, prev.ha_server_addr) == (
            live.broker_id, live.timeout_ms, live.data_version, live.ha_server_addr):
        live.materialized_update = prev.materialized_update
        if live.last_update == live.materialized_update:
            live.stale_since = -1
        elif prev.materialized_update == prev.last_update:
            live.stale_since = e["time"]
        else:
            live.stale_since = prev.stale_since
    else:
        res.dirty_tables.add(t.BROKER_LIVE.name)
    st.live[key] = live


def _registration_offset(e: dict[str, Any]) -> int:
    """Where the registration is in the log: a repeat counts as the registration it names (its
    connection's close undoes that one, `unregister_broker`'s registrationOffset)."""
    repeat = e.get("repeats")
    return int(max(repeat["offsets"])) if repeat else int(e.get("logOffset", -1))


def _update_filters(st: GroupState, e: dict[str, Any], res: Result) -> None:
    """§3.2.12 filter servers: absent = untouched, empty = removed."""
    servers = e["filterServerList"]
    if servers is None:
        return
    key = (e["clusterName"], e["brokerAddr"])
    if not servers:
        if st.filters.pop(key, None) is not None:
            res.dirty_tables.add(t.FILTER_SERVER.name)
    elif st.filters.get(key) != servers:
        st.filters[key] = list(servers)
        res.dirty_tables.add(t.FILTER_SERVER.name)


def _collect_chunk(st: GroupState, e: dict[str, Any], res: Result) -> dict[str, Any] | None:
    """Collect a chunked REGISTER_BROKER per address; return the whole registration once the
    last chunk arrived, else None. Chunks carry the same header (data version included); a
    chunk with a different header starts over (the broker re-sent a newer registration), a
    repeated chunk is ignored (producer retry)."""
    index, count = e["chunk"]
    key = (e["clusterName"], e["brokerAddr"])
    header = {k: v for k, v in e.items() if k not in ("topicConfigTable", "chunk", "time", "logOffset")}
    pending = st.pending.get(key)
    if pending is not None and (pending.count, pending.header) != (count, header):
        del st.pending[key]
        res.change("REGISTRATION_ABANDONED", cluster=key[0], addr=key[1], broker_id=e["brokerId"],
                   after=f"{len(pending.chunks)} of {pending.count} chunks superseded by a registration "
                         "with another header")
        pending = None
    if pending is None:
        pending = st.pending[key] = PendingRegistration(count, header, {}, e["time"])
    if index in pending.chunks:
        if pending.chunks[index] != e["topicConfigTable"]:
            raise Rejected(f"chunk {index} of {count} from {key[1]} differs from the copy already received")
        return None
    pending.chunks[index], pending.last_time = e["topicConfigTable"], e["time"]
    if len(pending.chunks) < count:
        return None
    del st.pending[key]
    merged: dict[str, Any] = {}
    for i in range(count):
        for topic, tc in pending.chunks[i].items():
            if topic in merged:
                raise Rejected(f"chunked registration of {key[1]} lists topic {topic} in more than one chunk")
            merged[topic] = tc
    return {**header, "time": e["time"], "logOffset": e.get("logOffset", -1), "topicConfigTable": merged,
            "chunk": None}


# ---------------------------------------------------------------- liveness and removal

def heartbeat(st: GroupState, e: dict[str, Any], cfg: RoutingConfig, res: Result) -> None:
    """§4: refresh liveness only; an unknown broker is a no-op."""
    li = st.live.get((e["clusterName"], e["brokerAddr"]))
    if li is not None and e["time"] > li.last_update:
        if li.materialized_update == li.last_update:
            li.stale_since = e["time"]
        li.last_update = e["time"]  # broker_live catches up in housekeeping.flush_live


def unregister_broker(st: GroupState, e: dict[str, Any], cfg: RoutingConfig, res: Result) -> None:
    """§5.3. One that undoes a given registration (a closed connection's, `registrationOffset`)
    leaves a newer registration of the address alone: the broker reconnected, perhaps to another
    front, and registered again before the old connection's close was applied. RocketMQ matches
    by address only and wipes the fresh entry (docs/semantics.md §15.1)."""
    undoes = e.get("registrationOffset")
    live = st.live.get((e["clusterName"], e["brokerAddr"]))
    if undoes is not None and live is not None and live.registered_offset > undoes:
        return
    st.pending.pop((e["clusterName"], e["brokerAddr"]), None)  # an interrupted chunked registration
    remove_address(st, e["clusterName"], e["brokerAddr"], res, "BROKER_UNREGISTERED")


def remove_address(st: GroupState, cluster: str, addr: str, res: Result, kind: str) -> None:
    """§5.3 for one request: live/filter entries, addrs by address, then queue cleanup."""
    if st.live.pop((cluster, addr), None) is not None:
        res.dirty_tables.add(t.BROKER_LIVE.name)
    if st.filters.pop((cluster, addr), None) is not None:
        res.dirty_tables.add(t.FILTER_SERVER.name)
    broker = st.broker
    if broker is None:
        return
    gone = [i for i, a in broker.addrs.items() if a == addr]
    for i in gone:
        del broker.addrs[i]
        res.change(kind, cluster=cluster, addr=addr, broker_id=i, before=addr)
    if gone:
        res.dirty_tables.add(t.BROKER_ADDR.name)
    if not broker.addrs:
        # The whole group is gone: its cluster membership (the request's cluster) and queues go too.
        st.broker = None
        res.dirty_tables.add(t.BROKER_ADDR.name)
        if cluster in st.clusters:
            st.clusters.discard(cluster)
            res.dirty_tables.add(t.CLUSTER_ADDR.name)
            res.change("CLUSTER_LEFT", cluster=cluster)
        for topic in sorted(st.topics):
            drop_queue(st, topic, res, "QUEUE_REMOVED")
    elif broker.enable_acting_master and min(broker.addrs) > MASTER_ID:
        # An acting-master group lost its master: its queues become read-only instead of vanishing.
        for topic in sorted(st.topics):
            set_perm(st, topic, st.topics[topic]["perm"] & ~PERM_WRITE, res, "QUEUE_CHANGED")


# ---------------------------------------------------------------- admin requests (§7)

def wipe_write_perm(st: GroupState, e: dict[str, Any], cfg: RoutingConfig, res: Result) -> None:
    """§7.1: clear the write bit; the count includes queues that were already read-only."""
    for topic in sorted(st.topics):
        set_perm(st, topic, st.topics[topic]["perm"] & ~PERM_WRITE, res, "WRITE_PERM_WIPED")
    res.perm_topic_counts.append(len(st.topics))


def add_write_perm(st: GroupState, e: dict[str, Any], cfg: RoutingConfig, res: Result) -> None:
    """§7.1: perm becomes exactly READ|WRITE (6), dropping any other bit."""
    for topic in sorted(st.topics):
        set_perm(st, topic, DEFAULT_PERM, res, "WRITE_PERM_ADDED")
    res.perm_topic_counts.append(len(st.topics))


def delete_topic(st: GroupState, e: dict[str, Any], cfg: RoutingConfig, res: Result) -> None:
    """§7.2, one hosting group's share: with a cluster, only if this group is listed in it."""
    cluster = e["clusterName"]
    if cluster is not None and cluster not in st.clusters:
        return
    drop_queue(st, e["topic"], res, "TOPIC_DELETED")


def register_topic(st: GroupState, e: dict[str, Any], cfg: RoutingConfig, res: Result) -> None:
    """§7.3, one group's share: an unknown broker stores nothing."""
    if st.broker is None:
        return
    put_queue(st, e["topic"], {k: e[k] for k in ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag")}, res)


HANDLERS: dict[str, Handler] = {
    ev.REGISTER_BROKER: register_broker,
    ev.BROKER_HEARTBEAT: heartbeat,
    ev.UNREGISTER_BROKER: unregister_broker,
    ev.WIPE_WRITE_PERM_OF_BROKER: wipe_write_perm,
    ev.ADD_WRITE_PERM_OF_BROKER: add_write_perm,
    ev.DELETE_TOPIC_IN_NAMESRV: delete_topic,
    ev.REGISTER_TOPIC_IN_NAMESRV: register_topic,
}
