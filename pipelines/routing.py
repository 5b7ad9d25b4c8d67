"""RouteInfoManager as a pure state machine over one broker group (one brokerName).

Every RocketMQ route table is keyed so that a broker group's rows never depend on another
group's events, so the streaming job groups events by brokerName and calls `apply` with
the group's state, its new events in Kafka order, and the batch's processing time. No I/O,
no Spark, no wall clock: replaying a batch gives the same result, which the sink's
idempotency relies on.

Rule references (§) point at ../shared/namesrv-semantics.md. Deliberate differences from
RocketMQ: a rejected registration changes nothing (RocketMQ keeps partial side effects), and
a live entry whose address left brokerAddrs is still expired.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Iterable

from schemas import events as ev
from schemas import tables as t

_WRITE = ev.PERM_WRITE


@dataclass(frozen=True)
class RoutingConfig:
    default_timeout_ms: int = 120_000
    delete_topic_with_broker_registration: bool = False
    # Heartbeats move lastUpdateTimestamp only in the state store; broker_live is rewritten with
    # the fresh values when something else changes, or once per `live_flush_ms` window (aligned
    # for all groups, so a quiet fleet adds one broker_live version per window, not per batch).
    # 0 = materialize every heartbeat.
    live_flush_ms: int = 60_000


@dataclass
class BrokerData:
    cluster: str
    addrs: dict[int, str] = field(default_factory=dict)
    zone_name: str | None = None
    enable_acting_master: bool = False


@dataclass
class LiveInfo:
    broker_id: int | None
    last_update: int
    timeout_ms: int
    data_version: dict[str, int]
    ha_server_addr: str | None
    materialized_update: int = -1  # the lastUpdateTimestamp broker_live holds for this entry
    stale_since: int = -1          # when last_update first moved past materialized_update


@dataclass
class PendingRegistration:
    """A chunked registration being assembled (one per registering address): nothing of it
    is visible until every chunk has arrived, then it applies as one REGISTER_BROKER."""

    count: int
    header: dict[str, Any]                     # the event minus topicConfigTable and chunk
    chunks: dict[int, dict[str, Any]]          # chunk index -> its slice of topicConfigTable
    last_time: int                             # event time of the newest chunk (abandon deadline)


class GroupState:
    """All route data owned by one brokerName.

    Persisted as two strings: a small core (broker, clusters, live, filters, pending chunks)
    and the topic table. Heartbeats and unchanged re-registrations only decode the core; the
    topic table is parsed on first access (`topics`) and re-encoded only if it was touched.
    """

    def __init__(self, broker_name: str, clusters: set[str] | None = None, broker: BrokerData | None = None,
                 topics: dict[str, dict[str, int]] | None = None,
                 live: dict[tuple[str, str], LiveInfo] | None = None,
                 filters: dict[tuple[str, str], list[str]] | None = None,
                 pending: dict[tuple[str, str], PendingRegistration] | None = None,
                 *, topics_json: str | None = None, topic_keys: str | None = None) -> None:
        self.broker_name = broker_name
        self.clusters = clusters if clusters is not None else set()
        self.broker = broker
        self.live = live if live is not None else {}
        self.filters = filters if filters is not None else {}
        self.pending = pending if pending is not None else {}
        # The topic table is either decoded (_topics) or still the stored JSON (_topics_json).
        self._topics: dict[str, dict[str, int]] = topics if topics is not None else {}
        self._topics_json = topics_json if topics is None else None
        self._topic_keys = topic_keys  # digest of the topic names, valid while _topics_json is set

    @property
    def topics(self) -> dict[str, dict[str, int]]:
        if self._topics_json is not None:
            self._topics = json.loads(self._topics_json)
            self._topics_json = None
        return self._topics

    def has_topics(self) -> bool:
        return self._topics_json != "{}" if self._topics_json is not None else bool(self._topics)

    def topic_keys_digest(self) -> str:
        """A digest of the topic names, without decoding the topic table when it is not loaded."""
        if self._topics_json is not None and self._topic_keys is not None:
            return self._topic_keys
        return topic_keys_digest(self.topics)

    def is_empty(self) -> bool:
        return not (self.clusters or self.broker or self.has_topics() or self.live or self.filters or self.pending)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GroupState) and self.to_json() == other.to_json()

    def __repr__(self) -> str:
        return f"GroupState({self.to_json()})"

    # -- persistence (flat strings: nested state schemas break applyInPandasWithState)
    def to_parts(self) -> tuple[str, str]:
        """(core JSON, topic table JSON); an untouched topic table is returned as it was read."""
        topics = self._topics_json if self._topics_json is not None else json.dumps(
            self._topics, separators=(",", ":"), sort_keys=True)
        core = {
            "brokerName": self.broker_name,
            "clusters": sorted(self.clusters),
            "broker": None if self.broker is None else {
                "cluster": self.broker.cluster,
                "addrs": {str(k): v for k, v in sorted(self.broker.addrs.items())},
                "zoneName": self.broker.zone_name,
                "enableActingMaster": self.broker.enable_acting_master,
            },
            "topicKeys": self.topic_keys_digest(),
            "live": [[c, a, li.broker_id, li.last_update, li.timeout_ms, li.data_version, li.ha_server_addr,
                      li.materialized_update, li.stale_since] for (c, a), li in sorted(self.live.items())],
            "filters": [[c, a, lst] for (c, a), lst in sorted(self.filters.items())],
            "pending": [[c, a, p.count, p.header, [[i, p.chunks[i]] for i in sorted(p.chunks)], p.last_time]
                        for (c, a), p in sorted(self.pending.items())],
        }
        return json.dumps(core, separators=(",", ":"), sort_keys=True), topics

    @staticmethod
    def from_parts(core_json: str, topics_json: str) -> "GroupState":
        raw = json.loads(core_json)
        b = raw["broker"]
        return GroupState(
            broker_name=raw["brokerName"],
            clusters=set(raw["clusters"]),
            broker=None if b is None else BrokerData(
                b["cluster"], {int(k): v for k, v in b["addrs"].items()}, b["zoneName"], b["enableActingMaster"]),
            live={(c, a): LiveInfo(*rest) for c, a, *rest in raw["live"]},
            filters={(c, a): lst for c, a, lst in raw["filters"]},
            pending={(c, a): PendingRegistration(n, header, {int(i): tbl for i, tbl in chunks}, last)
                     for c, a, n, header, chunks, last in raw.get("pending", [])},
            topics_json=topics_json, topic_keys=raw.get("topicKeys"),
        )

    def to_json(self) -> str:
        """One string (tests and debugging); the pipeline stores `to_parts`."""
        core, topics = self.to_parts()
        return json.dumps([json.loads(core), json.loads(topics)], separators=(",", ":"), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> "GroupState":
        core, topics = json.loads(text)
        return GroupState.from_parts(json.dumps(core), json.dumps(topics))


def topic_keys_digest(table: dict[str, Any]) -> str:
    """Order-independent digest of a topic table's names (re-registrations compare it)."""
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(table):
        h.update(name.encode())
        h.update(b"\0")
    return h.hexdigest()


@dataclass
class Result:
    """What one `apply` call did: tables whose rows changed, topology changes for the audit
    log (`route_changes`), and notable outcomes for the job's log."""

    dirty: set[str] = field(default_factory=set)
    rejected: list[str] = field(default_factory=list)
    expired: list[tuple[str, str]] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)  # wipe/add write-perm topic counts, in event order
    changes: list[dict[str, Any]] = field(default_factory=list)
    event_index: int | None = None  # which input event the changes being recorded come from
    time: int = 0                   # the instant they happen at (event time, or now for expiry)

    def change(self, kind: str, *, cluster: str | None = None, addr: str | None = None,
               broker_id: int | None = None, topic: str | None = None, before: Any = None, after: Any = None) -> None:
        self.changes.append({"kind": kind, "clusterName": cluster, "brokerAddr": addr, "brokerId": broker_id,
                             "topic": topic, "before": before, "after": after, "eventIndex": self.event_index,
                             "time": self.time})


class Rejected(Exception):
    pass


# ---------------------------------------------------------------- public API

def apply(state: GroupState | None, events: Iterable[dict[str, Any]], now_ms: int,
          cfg: RoutingConfig) -> tuple[GroupState | None, Result]:
    """Apply `events` (normalised, in Kafka order) to a group, then expire at `now_ms`.

    Before each event, entries already expired at that event's time are expired first, as
    RocketMQ's periodic scan would have done; so the outcome does not depend on how events
    are cut into micro-batches. Returns None as the state once the group holds nothing.
    """
    res = Result()
    st = state
    for i, e in enumerate(events):
        if st is None:
            st = GroupState(broker_name=e["brokerName"])
        res.event_index, res.time = None, e["time"]
        _expire(st, e["time"], cfg, res)
        res.event_index = i
        master_before, existed = _master(st), st.broker is not None
        handler = _HANDLERS[e["type"]]
        try:
            handler(st, e, cfg, res)
        except Rejected as exc:
            res.rejected.append(str(exc))
            res.change("REGISTRATION_REJECTED", cluster=e.get("clusterName"), addr=e.get("brokerAddr"),
                       broker_id=e.get("brokerId"), after=str(exc))
        master_after = _master(st)
        # A group that already existed got a (different) master: a switch, or a new master
        # after the old one left (its BROKER_UNREGISTERED/EXPIRED row names the old address).
        if existed and master_after is not None and master_before != master_after:
            res.change("MASTER_CHANGED", cluster=st.broker.cluster, addr=master_after, broker_id=ev.MASTER_ID,
                       before=master_before, after=master_after)
    if st is not None:
        res.event_index, res.time = None, now_ms
        _expire(st, now_ms, cfg, res)
        _flush_live(st, now_ms, cfg, res)
        if st.is_empty():
            st = None
    return st, res


def _flush_live(st: GroupState, now_ms: int, cfg: RoutingConfig, res: Result) -> None:
    """Decide whether broker_live gets this group's fresh lastUpdateTimestamps now: when its
    rows are rewritten anyway, or once the window in which an entry went stale has ended.
    Windows are aligned for every group, so a quiet fleet flushes in the same batch."""
    stale = [li for li in st.live.values() if li.materialized_update != li.last_update]
    due = t.BROKER_LIVE.name in res.dirty or not cfg.live_flush_ms or any(
        _window(now_ms, cfg) > _window(li.stale_since, cfg) for li in stale)
    if stale and due or t.BROKER_LIVE.name in res.dirty:
        for li in st.live.values():
            li.materialized_update, li.stale_since = li.last_update, -1
        res.dirty.add(t.BROKER_LIVE.name)


def _window(ms: int, cfg: RoutingConfig) -> int:
    return ms // cfg.live_flush_ms if cfg.live_flush_ms else ms


def _master(st: GroupState) -> str | None:
    return None if st.broker is None else st.broker.addrs.get(ev.MASTER_ID)


def next_deadline(state: GroupState | None, cfg: RoutingConfig) -> int | None:
    """When this group must be called again without data (the Spark timeout): its earliest
    expiry, or the next flush window if broker_live holds stale lastUpdateTimestamps."""
    if state is None or not (state.live or state.pending):
        return None
    deadline = min([li.last_update + li.timeout_ms for li in state.live.values()]
                   + [p.last_time + _pending_timeout(p, cfg) for p in state.pending.values()]) + 1
    stale = [li for li in state.live.values() if li.materialized_update != li.last_update]
    if cfg.live_flush_ms and stale:
        deadline = min(deadline, (min(_window(li.stale_since, cfg) for li in stale) + 1) * cfg.live_flush_ms)
    return deadline


def table_rows(state: GroupState | None, table: str) -> list[dict[str, Any]]:
    """The rows of `table` owned by this group, in a deterministic order."""
    if state is None:
        return []
    name = state.broker_name
    if table == t.TOPIC_QUEUE.name:
        return [{"topic": topic, "brokerName": name, **qd} for topic, qd in sorted(state.topics.items())]
    if table == t.BROKER_ADDR.name:
        b = state.broker
        if b is None:
            return []
        return [{"brokerName": name, "cluster": b.cluster, "brokerId": bid, "brokerAddr": addr,
                 "zoneName": b.zone_name, "enableActingMaster": b.enable_acting_master}
                for bid, addr in sorted(b.addrs.items())]
    if table == t.CLUSTER_ADDR.name:
        return [{"clusterName": c, "brokerName": name} for c in sorted(state.clusters)]
    if table == t.BROKER_LIVE.name:
        return [{"clusterName": c, "brokerAddr": a, "brokerName": name, "brokerId": li.broker_id,
                 "lastUpdateTimestamp": li.materialized_update, "heartbeatTimeoutMillis": li.timeout_ms,
                 "dataVersion": dump_data_version(li.data_version), "haServerAddr": li.ha_server_addr}
                for (c, a), li in sorted(state.live.items())]
    if table == t.FILTER_SERVER.name:
        return [{"clusterName": c, "brokerAddr": a, "brokerName": name, "filterServer": list(lst)}
                for (c, a), lst in sorted(state.filters.items())]
    raise KeyError(table)


def dump_data_version(dv: dict[str, int]) -> str:
    return json.dumps({"counter": dv["counter"], "stateVersion": dv["stateVersion"],
                       "timestamp": dv["timestamp"]}, separators=(",", ":"))


# ---------------------------------------------------------------- rules

def _put_queue(st: GroupState, topic: str, qd: dict[str, int], res: Result, *, added: str = "QUEUE_ADDED",
               changed: str = "QUEUE_CHANGED") -> None:
    before = st.topics.get(topic)
    if before == qd:
        return
    st.topics[topic] = qd
    res.dirty.add(t.TOPIC_QUEUE.name)
    res.change(added if before is None else changed, topic=topic, before=before, after=dict(qd))


def _drop_queue(st: GroupState, topic: str, res: Result, kind: str) -> None:
    before = st.topics.pop(topic, None)
    if before is not None:
        res.dirty.add(t.TOPIC_QUEUE.name)
        res.change(kind, topic=topic, before=before)


def _set_perm(st: GroupState, topic: str, perm: int, res: Result, kind: str) -> None:
    qd = st.topics[topic]
    if qd["perm"] != perm:
        res.change(kind, topic=topic, before=dict(qd), after={**qd, "perm": perm})
        qd["perm"] = perm
        res.dirty.add(t.TOPIC_QUEUE.name)


def _register(st: GroupState, e: dict[str, Any], cfg: RoutingConfig, res: Result) -> None:
    """§3.2, applied atomically: both rejection checks run before anything changes."""
    cluster, addr, bid = e["clusterName"], e["brokerAddr"], e["brokerId"]
    incoming_dv = e["dataVersion"]
    existing = st.broker.addrs if st.broker is not None else {}

    # §3.2.6 stale registration (controller mode): the id's current holder has a newer epoch.
    old_addr = existing.get(bid)
    if old_addr is not None and old_addr != addr:
        holder = st.live.get((cluster, old_addr))
        if holder is not None and holder.data_version["stateVersion"] > incoming_dv["stateVersion"]:
            raise Rejected(f"stale registration of {addr} as {st.broker_name}/{bid}: "
                           f"stateVersion {incoming_dv['stateVersion']} < {holder.data_version['stateVersion']} of {old_addr}")
    # §3.2.7 single-topic guard: an incremental one-topic registration must not create a broker.
    if bid not in existing and len(e["topicConfigTable"]) == 1:
        raise Rejected(f"register broker failed: single-topic registration of unknown {st.broker_name}/{bid} ({addr})")

    if cluster not in st.clusters:
        st.clusters.add(cluster)
        res.dirty.add(t.CLUSTER_ADDR.name)
        res.change("CLUSTER_JOINED", cluster=cluster)
    register_first = False
    if st.broker is None:
        st.broker = BrokerData(cluster=cluster)
        register_first = True
    b = st.broker
    is_old = e["enableActingMaster"] is None
    acting = (not is_old) and bool(e["enableActingMaster"])
    if (b.enable_acting_master, b.zone_name) != (acting, e["zoneName"]) or register_first:
        b.enable_acting_master, b.zone_name = acting, e["zoneName"]
        res.dirty.add(t.BROKER_ADDR.name)

    # §3.2.5 master/slave switch: one ip:port holds one id inside a group.
    moved_from = [i for i, a in b.addrs.items() if a == addr and i != bid]
    for other in moved_from:
        del b.addrs[other]
        res.dirty.add(t.BROKER_ADDR.name)
        res.change("ADDRESS_ID_CHANGED", cluster=b.cluster, addr=addr, broker_id=bid, before=other, after=bid)
    previous = b.addrs.get(bid)
    if previous != addr:
        b.addrs[bid] = addr
        res.dirty.add(t.BROKER_ADDR.name)
        if not moved_from:
            res.change("BROKER_REGISTERED", cluster=cluster, addr=addr, broker_id=bid, before=previous, after=addr)
    register_first = register_first or not previous

    # §3.2.9-10 whose topic config counts, and which topics change.
    is_master = bid == ev.MASTER_ID
    is_prime_slave = (not is_old) and (not is_master) and bid == min(b.addrs)
    if is_master or is_prime_slave:
        prev_live = st.live.get((cluster, addr))
        dv_changed = prev_live is None or prev_live.data_version != incoming_dv
        incoming = e["topicConfigTable"]
        if not (register_first or dv_changed) and topic_keys_digest(incoming) == st.topic_keys_digest():
            incoming = {}  # same version, same topic names: nothing to add or drop (topic table stays encoded)
        elif cfg.delete_topic_with_broker_registration:
            for topic in [x for x in st.topics if x not in incoming]:
                _drop_queue(st, topic, res, "QUEUE_REMOVED")
        for topic, tc in sorted(incoming.items()):
            if register_first or dv_changed or topic not in st.topics:
                perm = tc["perm"]
                if is_prime_slave and b.enable_acting_master:
                    perm &= ~_WRITE
                _put_queue(st, topic, {"readQueueNums": tc["readQueueNums"], "writeQueueNums": tc["writeQueueNums"],
                                       "perm": perm, "topicSysFlag": tc["topicSysFlag"]}, res)

    # §3.2.11 live table. A re-registration that only moves lastUpdateTimestamp is treated
    # like a heartbeat for materialization (brokers re-register every 30 s).
    live = LiveInfo(broker_id=bid, last_update=e["time"],
                    timeout_ms=e["heartbeatTimeoutMillis"] or cfg.default_timeout_ms,
                    data_version=dict(incoming_dv), ha_server_addr=e["haServerAddr"])
    prev = st.live.get((cluster, addr))
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
        res.dirty.add(t.BROKER_LIVE.name)
    st.live[(cluster, addr)] = live

    # §3.2.12 filter servers: absent = untouched, empty = removed
    fl = e["filterServerList"]
    if fl is not None:
        key = (cluster, addr)
        if not fl:
            if st.filters.pop(key, None) is not None:
                res.dirty.add(t.FILTER_SERVER.name)
        elif st.filters.get(key) != fl:
            st.filters[key] = list(fl)
            res.dirty.add(t.FILTER_SERVER.name)


def _register_chunk(st: GroupState, e: dict[str, Any], cfg: RoutingConfig, res: Result) -> None:
    """A REGISTER_BROKER whose topic table came in `count` chunks: collect them per address,
    apply the whole registration when the last one arrives. Chunks carry the same header (data
    version included); a chunk with a different header starts over (the broker re-sent a newer
    registration), a repeated chunk is ignored (producer retry)."""
    if e.get("chunk") is None:
        _register(st, e, cfg, res)
        return
    index, count = e["chunk"]
    key = (e["clusterName"], e["brokerAddr"])
    header = {k: v for k, v in e.items() if k not in ("topicConfigTable", "chunk", "time")}
    p = st.pending.get(key)
    if p is not None and (p.count, p.header) != (count, header):
        del st.pending[key]
        res.change("REGISTRATION_ABANDONED", cluster=key[0], addr=key[1], broker_id=e["brokerId"],
                   after=f"{len(p.chunks)} of {p.count} chunks superseded by a registration with another header")
        p = None
    if p is None:
        p = st.pending[key] = PendingRegistration(count, header, {}, e["time"])
    if index in p.chunks:
        if p.chunks[index] != e["topicConfigTable"]:
            raise Rejected(f"chunk {index} of {count} from {key[1]} differs from the copy already received")
        return
    p.chunks[index], p.last_time = e["topicConfigTable"], e["time"]
    if len(p.chunks) < count:
        return
    del st.pending[key]
    merged: dict[str, Any] = {}
    for i in range(count):
        for topic, tc in p.chunks[i].items():
            if topic in merged:
                raise Rejected(f"chunked registration of {key[1]} lists topic {topic} in more than one chunk")
            merged[topic] = tc
    _register(st, {**header, "time": e["time"], "topicConfigTable": merged, "chunk": None}, cfg, res)


def _abandon_stale_chunks(st: GroupState, now_ms: int, cfg: RoutingConfig, res: Result) -> None:
    """An incomplete chunked registration whose newest chunk is older than the broker timeout
    will never complete (the broker would have re-sent it): drop it rather than keep it forever."""
    for (cluster, addr), p in sorted(st.pending.items()):
        if p.last_time + _pending_timeout(p, cfg) < now_ms:
            del st.pending[(cluster, addr)]
            res.change("REGISTRATION_ABANDONED", cluster=cluster, addr=addr, broker_id=p.header.get("brokerId"),
                       after=f"{len(p.chunks)} of {p.count} chunks, the last at {p.last_time}")


def _pending_timeout(p: PendingRegistration, cfg: RoutingConfig) -> int:
    return p.header.get("heartbeatTimeoutMillis") or cfg.default_timeout_ms


def _heartbeat(st: GroupState, e: dict[str, Any], cfg: RoutingConfig, res: Result) -> None:
    """§4: refresh liveness only; an unknown broker is a no-op."""
    li = st.live.get((e["clusterName"], e["brokerAddr"]))
    if li is not None and e["time"] > li.last_update:
        if li.materialized_update == li.last_update:
            li.stale_since = e["time"]
        li.last_update = e["time"]  # broker_live catches up in _flush_live


def _unregister(st: GroupState, e: dict[str, Any], cfg: RoutingConfig, res: Result) -> None:
    st.pending.pop((e["clusterName"], e["brokerAddr"]), None)  # an interrupted chunked registration
    _remove_address(st, e["clusterName"], e["brokerAddr"], res, "BROKER_UNREGISTERED")


def _remove_address(st: GroupState, cluster: str, addr: str, res: Result, kind: str) -> None:
    """§5.3 for one request: live/filter entries, addrs by address, then queue cleanup."""
    if st.live.pop((cluster, addr), None) is not None:
        res.dirty.add(t.BROKER_LIVE.name)
    if st.filters.pop((cluster, addr), None) is not None:
        res.dirty.add(t.FILTER_SERVER.name)
    b = st.broker
    if b is None:
        return
    gone = [i for i, a in b.addrs.items() if a == addr]
    for i in gone:
        del b.addrs[i]
        res.change(kind, cluster=cluster, addr=addr, broker_id=i, before=addr)
    if gone:
        res.dirty.add(t.BROKER_ADDR.name)
    if not b.addrs:
        # The whole group is gone: its cluster membership (the request's cluster) and queues go too.
        st.broker = None
        res.dirty.add(t.BROKER_ADDR.name)
        if cluster in st.clusters:
            st.clusters.discard(cluster)
            res.dirty.add(t.CLUSTER_ADDR.name)
            res.change("CLUSTER_LEFT", cluster=cluster)
        for topic in sorted(st.topics):
            _drop_queue(st, topic, res, "QUEUE_REMOVED")
    elif b.enable_acting_master and min(b.addrs) > ev.MASTER_ID:
        # An acting-master group lost its master: its queues become read-only instead of vanishing.
        for topic in sorted(st.topics):
            _set_perm(st, topic, st.topics[topic]["perm"] & ~_WRITE, res, "QUEUE_CHANGED")


def _expire(st: GroupState, now_ms: int, cfg: RoutingConfig, res: Result) -> None:
    """§5.1: every live entry with lastUpdateTimestamp + timeout < now is unregistered.

    As in RocketMQ the unregister needs the address to resolve to this group's BrokerData in
    the same cluster; where it does not (quirk 14.9, RocketMQ keeps the entry forever), the
    live and filter entries are dropped and nothing else changes.
    """
    _abandon_stale_chunks(st, now_ms, cfg, res)
    for (cluster, addr), li in sorted(st.live.items()):
        if li.last_update + li.timeout_ms < now_ms:
            res.expired.append((cluster, addr))
            b = st.broker
            if b is not None and b.cluster == cluster and addr in b.addrs.values():
                _remove_address(st, cluster, addr, res, "BROKER_EXPIRED")
            else:
                del st.live[(cluster, addr)]
                res.dirty.add(t.BROKER_LIVE.name)
                res.change("BROKER_EXPIRED", cluster=cluster, addr=addr, broker_id=li.broker_id)
                if st.filters.pop((cluster, addr), None) is not None:
                    res.dirty.add(t.FILTER_SERVER.name)


def _wipe_write_perm(st: GroupState, e: dict[str, Any], cfg: RoutingConfig, res: Result) -> None:
    """§7.1: clear the write bit; the count includes queues that were already read-only."""
    for topic in sorted(st.topics):
        _set_perm(st, topic, st.topics[topic]["perm"] & ~_WRITE, res, "WRITE_PERM_WIPED")
    res.counts.append(len(st.topics))


def _add_write_perm(st: GroupState, e: dict[str, Any], cfg: RoutingConfig, res: Result) -> None:
    """§7.1: perm becomes exactly READ|WRITE (6), dropping any other bit."""
    for topic in sorted(st.topics):
        _set_perm(st, topic, ev.DEFAULT_PERM, res, "WRITE_PERM_ADDED")
    res.counts.append(len(st.topics))


def _delete_topic(st: GroupState, e: dict[str, Any], cfg: RoutingConfig, res: Result) -> None:
    """§7.2, one hosting group's share: with a cluster, only if this group is listed in it."""
    cluster = e["clusterName"]
    if cluster is not None and cluster not in st.clusters:
        return
    _drop_queue(st, e["topic"], res, "TOPIC_DELETED")


def _register_topic(st: GroupState, e: dict[str, Any], cfg: RoutingConfig, res: Result) -> None:
    """§7.3, one group's share: an unknown broker stores nothing."""
    if st.broker is None:
        return
    _put_queue(st, e["topic"], {k: e[k] for k in ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag")}, res)


_HANDLERS = {
    ev.REGISTER_BROKER: _register_chunk,
    ev.BROKER_HEARTBEAT: _heartbeat,
    ev.UNREGISTER_BROKER: _unregister,
    ev.WIPE_WRITE_PERM_OF_BROKER: _wipe_write_perm,
    ev.ADD_WRITE_PERM_OF_BROKER: _add_write_perm,
    ev.DELETE_TOPIC_IN_NAMESRV: _delete_topic,
    ev.REGISTER_TOPIC_IN_NAMESRV: _register_topic,
}
