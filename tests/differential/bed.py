"""The differential test bed: the same remoting requests to RocketMQ's NameServer and to ours,
every read compared after every step.

A sequence (one hypothesis example) works in its own namespace — cluster, broker, topic and
KV names carry the example's prefix, addresses its own /24 — so one long-lived NameServer
on each side serves every example, and reads are compared within the prefix. The runtime
switches are global: every sequence starts by setting them to their defaults on both sides.

Brokers are simulated the way real ones behave towards a NameServer: each address is one
broker process with one connection (its channel), a fixed brokerName and cluster, and any
brokerId (master/slave switches); dropping the connection is what a crash does.

Accepted differences are named in `ALLOWED` with their reason (docs/http-api.md, "Where this
differs from RocketMQ" lists the same); anything else fails with the shrunk sequence.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from remoting import bodies, codes
from remoting.client import RemotingClient
from remoting.protocol import Command
from remoting.replies import SNAPSHOT_EXT

# ------------------------------------------------------------------ accepted differences

ALLOWED: dict[str, str] = {
    "single-topic-guard": (
        "a single-topic registration refused by the guard where RocketMQ would keep an empty BrokerData (the "
        "group is new, or its only address moves to the refused id) changes nothing here; RocketMQ lists the "
        "group with no addresses (in cluster info, in routes of its topics) until it registers in full"),
    "system-topic-broker-addr": (
        "304's brokerAddr is the smallest brokerName's smallest id; RocketMQ takes whichever BrokerData its "
        "HashMap yields first, so the field is not compared"),
    "snapshot-id": (
        "our read answers carry the id of the cut they came from in extFields (`namesrvSnapshotId`), so "
        "answers of serving replicas can be compared; RocketMQ's clients ignore extFields they do not decode, "
        "so the key is not compared"),
    "route-order": (
        "queueDatas/brokerDatas are sorted by brokerName in our answers and come in HashMap order in "
        "RocketMQ's; clients do not depend on the order, so they are compared sorted"),
}


# ------------------------------------------------------------------ the sequence's universe

BROKERS, SLOTS, TOPICS, ZONES = 3, 3, 4, ("az1", "az2")
SWITCHES = {"orderMessageEnable": "false", "supportActingMaster": "false", "enableTopicList": "true",
            "enableAllTopicList": "true"}


@dataclass(frozen=True)
class Universe:
    """Names of one sequence: prefix `p`, brokers with a fixed cluster each, addresses per broker."""

    n: int
    clusters_of: tuple[int, ...]  # broker index -> cluster index

    @property
    def p(self) -> str:
        return f"d{self.n}x"

    def cluster(self, c: int) -> str:
        return f"{self.p}C{c}"

    def broker(self, b: int) -> str:
        return f"{self.p}b{b}"

    def broker_cluster(self, b: int) -> str:
        return self.cluster(self.clusters_of[b])

    def addr(self, b: int, slot: int) -> str:
        return f"10.{self.n // 250 % 250}.{self.n % 250}.{b * SLOTS + slot + 1}:10911"

    def topic(self, i: int) -> str:
        return f"{self.p}T{i}"

    @property
    def namespace(self) -> str:
        return f"{self.p}ns"


Step = tuple[str, dict[str, Any]]

_b = st.integers(0, BROKERS - 1)
_slot = st.integers(0, SLOTS - 1)
_topic_cfg = st.fixed_dictionaries({"readQueueNums": st.sampled_from([1, 4, 8]),
                                    "writeQueueNums": st.sampled_from([1, 4, 8]),
                                    "perm": st.sampled_from([6, 6, 4, 2]), "topicSysFlag": st.sampled_from([0, 0, 1])})

STEPS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "register": st.fixed_dictionaries({
        "b": _b, "slot": _slot, "id": st.sampled_from([0, 0, 1, 2]),
        # one topic is an incremental registration (refused for an id the group does not have)
        "topics": st.sampled_from([2] * 11 + [1]).flatmap(
            lambda least: st.dictionaries(st.integers(0, TOPICS - 1), _topic_cfg, min_size=least,
                                          max_size=TOPICS if least > 1 else 1)),
        "counter": st.integers(1, 3), "sv": st.integers(0, 3),
        "acting": st.sampled_from([False, False, True, None]), "zone": st.sampled_from([None, *ZONES]),
        "filters": st.sampled_from([[], [], ["10.99.0.1:7000"]])}),
    "unregister": st.fixed_dictionaries({"b": _b, "slot": _slot, "id": st.sampled_from([0, 1, 2])}),
    "heartbeat": st.fixed_dictionaries({"b": _b, "slot": _slot}),
    "drop": st.fixed_dictionaries({"b": _b, "slot": _slot}),
    "kv_put": st.fixed_dictionaries({"ns": st.sampled_from(["own", "ORDER_TOPIC_CONFIG"]), "k": st.integers(0, 1),
                                     "v": st.sampled_from(["a", "b", "1:2"])}),
    "kv_delete": st.fixed_dictionaries({"ns": st.sampled_from(["own", "ORDER_TOPIC_CONFIG"]), "k": st.integers(0, 1)}),
    # a shared server: ORDER_TOPIC_CONFIG is in every registration's answer, so only the own namespace
    "kv_put_own": st.fixed_dictionaries({"ns": st.just("own"), "k": st.integers(0, 1), "v": st.sampled_from(["a", "b"])}),
    "kv_delete_own": st.fixed_dictionaries({"ns": st.just("own"), "k": st.integers(0, 1)}),
    "wipe": st.fixed_dictionaries({"b": _b}),
    "add": st.fixed_dictionaries({"b": _b}),
    "delete_topic": st.fixed_dictionaries({"t": st.integers(0, TOPICS - 1), "c": st.sampled_from([None, 0, 1])}),
    "register_topic": st.fixed_dictionaries({"t": st.integers(0, TOPICS - 1),
                                             "on": st.lists(_b, min_size=1, max_size=2, unique=True),
                                             "cfg": _topic_cfg}),
    "switch": st.fixed_dictionaries({"key": st.sampled_from(sorted(SWITCHES)), "value": st.booleans()}),
}
# registrations dominate, as they do in a real fleet
_WEIGHTED = ["register"] * 6 + ["unregister", "heartbeat", "drop", "kv_put", "kv_delete", "wipe", "add",
                                "delete_topic", "register_topic", "switch"]


def steps(max_steps: int, *, shared_server: bool = False) -> st.SearchStrategy[list[Step]]:
    """Sequences of up to `max_steps`; on a `shared_server` (other tests use it) no KV write reaches
    a namespace other sequences' answers carry."""
    kinds = [{"kv_put": "kv_put_own", "kv_delete": "kv_delete_own"}.get(k, k) if shared_server else k
             for k in _WEIGHTED]
    one = st.sampled_from(kinds).flatmap(lambda kind: STEPS[kind].map(lambda a: (kind.removesuffix("_own"), a)))
    return st.lists(one, min_size=max_steps // 2, max_size=max_steps)


clusters_of = st.tuples(*[st.integers(0, 1)] * BROKERS)


# ------------------------------------------------------------------ one NameServer, as its clients see it

@dataclass
class Side:
    """One NameServer endpoint: a connection per simulated broker process, one for admin and reads."""

    name: str
    addr: str
    sign: dict[str, str] = field(default_factory=dict)  # RemotingClient key-pair kwargs
    _brokers: dict[str, RemotingClient] = field(default_factory=dict)
    _admin: RemotingClient | None = None

    def broker(self, addr: str) -> RemotingClient:
        c = self._brokers.get(addr)
        if c is None:
            c = self._brokers[addr] = RemotingClient(self.addr, **self.sign)
        return c

    def drop(self, addr: str) -> None:
        c = self._brokers.pop(addr, None)
        if c is not None:
            c.close()

    @property
    def admin(self) -> RemotingClient:
        if self._admin is None:
            self._admin = RemotingClient(self.addr, **self.sign)
        return self._admin

    def close(self) -> None:
        for a in list(self._brokers):
            self.drop(a)
        if self._admin is not None:
            self._admin.close()
            self._admin = None


def send(side: Side, u: Universe, kind: str, a: dict[str, Any]) -> Command | None:
    """Send one step's request; returns the answer (None for a dropped connection)."""
    if kind == "register":
        topics = {u.topic(i): {"topicName": u.topic(i), **cfg, "order": False} for i, cfg in a["topics"].items()}
        addr = u.addr(a["b"], a["slot"])
        return side.broker(addr).register_broker(
            cluster=u.broker_cluster(a["b"]), broker_name=u.broker(a["b"]), broker_id=a["id"], addr=addr,
            ha_addr=addr[:-1] + "2", topics=topics, acting=a["acting"], filter_servers=a["filters"],
            data_version={"timestamp": 1, "counter": a["counter"], "stateVersion": a["sv"]},
            ext={} if a["zone"] is None else {"__ZONE_NAME": a["zone"]})
    if kind == "unregister":
        addr = u.addr(a["b"], a["slot"])
        return side.broker(addr).call(codes.UNREGISTER_BROKER, {
            "brokerName": u.broker(a["b"]), "brokerAddr": addr, "clusterName": u.broker_cluster(a["b"]),
            "brokerId": str(a["id"])})
    if kind == "heartbeat":
        addr = u.addr(a["b"], a["slot"])
        return side.broker(addr).call(codes.BROKER_HEARTBEAT, {
            "clusterName": u.broker_cluster(a["b"]), "brokerAddr": addr, "brokerName": u.broker(a["b"])})
    if kind == "drop":
        side.drop(u.addr(a["b"], a["slot"]))
        return None
    if kind in ("kv_put", "kv_delete"):
        ns = u.namespace if a["ns"] == "own" else a["ns"]
        ext = {"namespace": ns, "key": u.topic(a["k"])}
        if kind == "kv_put":
            return side.admin.call(codes.PUT_KV_CONFIG, {**ext, "value": a["v"]})
        return side.admin.call(codes.DELETE_KV_CONFIG, ext)
    if kind in ("wipe", "add"):
        code = codes.WIPE_WRITE_PERM_OF_BROKER if kind == "wipe" else codes.ADD_WRITE_PERM_OF_BROKER
        return side.admin.call(code, {"brokerName": u.broker(a["b"])})
    if kind == "delete_topic":
        ext = {"topic": u.topic(a["t"])}
        if a["c"] is not None:
            ext["clusterName"] = u.cluster(a["c"])
        return side.admin.call(codes.DELETE_TOPIC_IN_NAMESRV, ext)
    if kind == "register_topic":
        queue_datas = [{"brokerName": u.broker(b), **a["cfg"]} for b in a["on"]]
        body = json.dumps({"queueDatas": queue_datas, "brokerDatas": []}).encode()
        return side.admin.call(codes.REGISTER_TOPIC_IN_NAMESRV, {"topic": u.topic(a["t"])}, body)
    if kind == "switch":
        return side.admin.call(codes.UPDATE_NAMESRV_CONFIG, {}, f"{a['key']}={str(a['value']).lower()}\n".encode())
    raise ValueError(kind)


def reset_switches(side: Side) -> None:
    body = "".join(f"{k}={v}\n" for k, v in sorted(SWITCHES.items())).encode()
    answer = side.admin.call(codes.UPDATE_NAMESRV_CONFIG, {}, body)
    assert answer.code == codes.SUCCESS, (side.name, answer.code, answer.remark)


# ------------------------------------------------------------------ reads, normalised

def _body(cmd: Command) -> Any:
    return bodies.loads_lenient(cmd.body) if cmd.body else None


def _ext(cmd: Command) -> dict[str, str]:
    return {k: v for k, v in (cmd.ext or {}).items() if v is not None and k != SNAPSHOT_EXT}  # ALLOWED


def _mine(names: Any, u: Universe) -> list[str]:
    return sorted(n for n in names or [] if n.startswith(u.p))


def normalise(code: int, cmd: Command, u: Universe) -> Any:
    """The answer as comparable data, within the sequence's prefix (see ALLOWED for what is not compared)."""
    body = _body(cmd)
    if cmd.code != codes.SUCCESS or body is None:
        return {"code": cmd.code, "remark": cmd.remark, "ext": _ext(cmd), "body": body}
    if code == codes.GET_ROUTEINFO_BY_TOPIC:
        body = {**body, "queueDatas": sorted(body.get("queueDatas") or [], key=lambda q: q["brokerName"]),
                "brokerDatas": sorted(({**bd, "brokerAddrs": {str(k): v for k, v in bd["brokerAddrs"].items()}}
                                       for bd in body.get("brokerDatas") or []), key=lambda bd: bd["brokerName"]),
                "filterServerTable": body.get("filterServerTable") or {}}
        body.pop("orderTopicConf", None) if body.get("orderTopicConf") is None else None
    elif code == codes.GET_BROKER_CLUSTER_INFO:
        body = {"brokerAddrTable": {k: {**v, "brokerAddrs": {str(i): a for i, a in v["brokerAddrs"].items()}}
                                    for k, v in (body.get("brokerAddrTable") or {}).items() if k.startswith(u.p)},
                "clusterAddrTable": {k: sorted(v) for k, v in (body.get("clusterAddrTable") or {}).items()
                                     if k.startswith(u.p)}}
    elif code in (codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, codes.GET_TOPICS_BY_CLUSTER, codes.GET_UNIT_TOPIC_LIST,
                  codes.GET_HAS_UNIT_SUB_TOPIC_LIST, codes.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,
                  codes.GET_SYSTEM_TOPIC_LIST_FROM_NS):
        body = {"topicList": _mine(body.get("topicList"), u)}  # 304's brokerAddr: ALLOWED system-topic-broker-addr
    elif code == codes.GET_KVLIST_BY_NAMESPACE:
        body = {"table": {k: v for k, v in (body.get("table") or {}).items() if k.startswith(u.p)}}
    elif code == codes.GET_BROKER_MEMBER_GROUP:
        group = body.get("brokerMemberGroup") or body
        body = {**group, "brokerAddrs": {str(k): v for k, v in (group.get("brokerAddrs") or {}).items()}}
    return {"code": cmd.code, "remark": cmd.remark, "ext": _ext(cmd), "body": body}


def reads(u: Universe, touched: Touched) -> Iterator[tuple[str, int, dict[str, str]]]:
    """Every read the sequence can have changed: (label, code, extFields)."""
    for t in sorted(touched.topics):
        yield f"105 {t}", codes.GET_ROUTEINFO_BY_TOPIC, {"topic": t}
        for z in ZONES:
            yield f"105 {t} zone {z}", codes.GET_ROUTEINFO_BY_TOPIC, {"topic": t, "__ZONE_MODE": "true",
                                                                    "__ZONE_NAME": z}
    yield "106", codes.GET_BROKER_CLUSTER_INFO, {}
    yield "206", codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {}
    for c in sorted(touched.clusters):
        yield f"224 {c}", codes.GET_TOPICS_BY_CLUSTER, {"cluster": c}
    yield "304", codes.GET_SYSTEM_TOPIC_LIST_FROM_NS, {}
    for code in (codes.GET_UNIT_TOPIC_LIST, codes.GET_HAS_UNIT_SUB_TOPIC_LIST,
                 codes.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST):
        yield str(code), code, {}
    for ns in sorted(touched.namespaces):
        yield f"219 {ns}", codes.GET_KVLIST_BY_NAMESPACE, {"namespace": ns}
        for k in sorted(touched.keys):
            yield f"101 {ns}/{k}", codes.GET_KV_CONFIG, {"namespace": ns, "key": k}
    for cluster, addr in sorted(touched.addrs):
        yield f"322 {addr}", codes.QUERY_DATA_VERSION, {"clusterName": cluster, "brokerAddr": addr}
    for cluster, name in sorted(touched.groups):
        yield f"901 {name}", codes.GET_BROKER_MEMBER_GROUP, {"clusterName": cluster, "brokerName": name}


_DV_BODY = json.dumps({"timestamp": 1, "counter": 1, "stateVersion": 0}).encode()


def call_reads(side: Side, requests: list[tuple[int, dict[str, str]]]) -> list[Command]:
    """Pipelined on the admin connection (both NameServers answer by opaque, in any order)."""
    c = side.admin
    opaques = []
    for code, ext in requests:
        if code == codes.QUERY_DATA_VERSION:
            opaques.append(c.send(code, {**ext, "brokerId": "0", "brokerName": "x"}, _DV_BODY))
        else:
            opaques.append(c.send(code, dict(ext)))
    answers = {}
    while len(answers) < len(opaques):
        answer = c.receive()
        answers[answer.opaque] = answer
    return [answers[o] for o in opaques]


@dataclass
class Touched:
    """What a sequence has named so far (the reads that can differ)."""

    topics: set[str] = field(default_factory=set)
    clusters: set[str] = field(default_factory=set)
    namespaces: set[str] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)
    addrs: set[tuple[str, str]] = field(default_factory=set)
    groups: set[tuple[str, str]] = field(default_factory=set)

    def note(self, u: Universe, kind: str, a: dict[str, Any]) -> None:
        if "b" in a:
            self.clusters.add(u.broker_cluster(a["b"]))
            self.groups.add((u.broker_cluster(a["b"]), u.broker(a["b"])))
        if "slot" in a:
            self.addrs.add((u.broker_cluster(a["b"]), u.addr(a["b"], a["slot"])))
        if kind == "register":
            self.topics.update(u.topic(i) for i in a["topics"])
        if "t" in a:
            self.topics.add(u.topic(a["t"]))
        if kind in ("kv_put", "kv_delete"):
            self.namespaces.add(u.namespace if a["ns"] == "own" else a["ns"])
            self.keys.add(u.topic(a["k"]))


def snapshot_of(side: Side, u: Universe, touched: Touched) -> dict[str, Any]:
    asked = list(reads(u, touched))
    answers = call_reads(side, [(code, ext) for _, code, ext in asked])
    return {label: normalise(code, answer, u) for (label, code, _), answer in zip(asked, answers, strict=True)}


def empty_broker_data(side: Side, u: Universe) -> bool:
    info = _body(side.admin.call(codes.GET_BROKER_CLUSTER_INFO)) or {}
    return any(name.startswith(u.p) and not bd.get("brokerAddrs")
               for name, bd in (info.get("brokerAddrTable") or {}).items())


def differences(a: dict[str, Any], b: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def settle(java: Side, ours: Side, u: Universe, touched: Touched, wait_s: float) -> dict[str, tuple[Any, Any]]:
    """Compare every read; while they differ, ask again for up to `wait_s` (RocketMQ applies
    unregistrations from a queue, our front publishes a closed channel's asynchronously, and the
    running system serves a write once its cut lands)."""
    deadline = time.monotonic() + wait_s
    while True:
        diff = differences(snapshot_of(java, u, touched), snapshot_of(ours, u, touched))
        if not diff or time.monotonic() >= deadline:
            return diff
        time.sleep(0.05)


def answer_of(cmd: Command | None, kind: str) -> Any:
    """What a write's answer says that must agree (code, remark, result fields)."""
    if cmd is None:
        return None
    ext = _ext(cmd)
    if kind == "register":
        ext = {k: v for k, v in ext.items() if k in ("masterAddr", "haServerAddr")}
    elif kind in ("wipe", "add"):
        ext = {k: v for k, v in ext.items() if k in ("wipeTopicCount", "addTopicCount")}
    else:
        ext = {}
    return {"code": cmd.code, "remark": cmd.remark, "ext": ext}


@dataclass
class Outcome:
    sequences: int = 0
    steps: int = 0
    reads: int = 0
    guarded: int = 0  # sequences ended by ALLOWED single-topic-guard


ASYNC_IN_BOTH = frozenset({"unregister", "drop"})  # applied after the answer on both sides


def run_sequence(java: Side, ours: Side, u: Universe, seq: list[Step], outcome: Outcome, *,
                 settle_s: float = 3.0, async_kinds: frozenset[str] = ASYNC_IN_BOTH) -> None:
    """Drive one sequence through both sides; AssertionError names the first step that differs."""
    for side in (java, ours):
        reset_switches(side)
    outcome.sequences += 1
    touched = Touched()
    try:
        for i, (kind, a) in enumerate(seq):
            touched.note(u, kind, a)
            aj, ao = answer_of(send(java, u, kind, a), kind), answer_of(send(ours, u, kind, a), kind)
            assert aj == ao, _report(seq, i, {"answer": (aj, ao)})
            if kind == "register" and aj["remark"] == "register broker failed" and empty_broker_data(java, u):
                # ALLOWED single-topic-guard: RocketMQ keeps an empty BrokerData until the group
                # registers in full; the rest of this sequence is not comparable.
                outcome.guarded += 1
                return
            diff = settle(java, ours, u, touched, settle_s if kind in async_kinds else 0.0)
            outcome.steps += 1
            outcome.reads += len(list(reads(u, touched)))
            assert not diff, _report(seq, i, diff)
    finally:
        for side in (java, ours):  # the switches are global: leave them as found
            try:
                reset_switches(side)
            finally:
                side.close()


def _report(seq: list[Step], i: int, diff: dict[str, tuple[Any, Any]]) -> str:
    lines = [f"after step {i} of {len(seq)}, RocketMQ's NameServer and ours differ:"]
    for j, (kind, a) in enumerate(seq[: i + 1]):
        lines.append(f"  {j}: {kind} {a}")
    for label, (j, o) in diff.items():
        lines.append(f"  {label}:\n    RocketMQ: {j}\n    ours:     {o}")
    return "\n".join(lines)
