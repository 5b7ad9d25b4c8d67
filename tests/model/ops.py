"""Generated workloads for the model-based tests: a small universe of clusters, broker groups,
addresses and topics, so that collisions (switches, stale epochs, moves, deletes) are frequent."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from schemas import events as ev

NAMES = ["b0", "b1", "b2"]
CLUSTERS = ["C1", "C2"]
TOPICS = ["T0", "T1", "T2", "T3"]
NAMESPACES = ["ns1", "ORDER_TOPIC_CONFIG"]


def addr(name: str, slot: int) -> str:
    return f"10.0.{NAMES.index(name)}.{slot}:10911"


queue = st.fixed_dictionaries({"read": st.integers(0, 4), "write": st.integers(0, 4), "perm": st.integers(0, 7),
                               "sys_flag": st.integers(0, 3)})


def operations(names: list[str]) -> st.SearchStrategy:
    """One operation on broker groups `names` (fewer names = more interplay inside a group)."""
    name = st.sampled_from(names)
    register = st.builds(
        lambda name, bid, slot, cluster, tps, base, counter, sv, acting, timeout, zone, filters, chunked: ("register", {
            "name": name, "id": bid, "addr": addr(name, bid if slot is None else slot), "cluster": cluster,
            "counter": counter, "sv": sv,
            "topics": {**({"Base": ev.topic_config("Base")} if base else {}),
                       **{t: ev.topic_config(t, **q) for t, q in tps.items()}}, "acting": acting,
            "timeout": timeout, "zone": zone, "filters": filters, "chunked": chunked}),
        # slot None = the address usual for that id; repeated data versions make "unchanged" frequent
        name, st.integers(0, 2), st.sampled_from([None, None, None, 0, 1, 2]),
        st.sampled_from(["C1", "C1", "C1", "C2"]),
        # like upstream's tests, most registrations carry a base topic (a lone topic trips the
        # single-topic guard)
        st.dictionaries(st.sampled_from(TOPICS), queue, max_size=3), st.sampled_from([True, True, True, False]),
        st.sampled_from([1, 1, 1, 2]),
        st.sampled_from([0, 0, 0, 1, 2]),
        st.sampled_from([None, False, True, True]), st.sampled_from([1500, 4000, 8000, None]),
        st.sampled_from([None, "z1"]), st.sampled_from([None, [], ["10.9.9.9:1"]]),
        # chunked: published as one chunk per topic, split over two batches
        st.sampled_from([False, True]))
    heartbeat = st.builds(lambda name, slot, cluster: ("heartbeat", {"name": name, "addr": addr(name, slot),
                                                                     "cluster": cluster}),
                          name, st.integers(0, 2), st.sampled_from(["C1", "C1", "C2"]))
    unregister = st.builds(lambda name, bid, slot, cluster: ("unregister", {
        "name": name, "id": bid, "addr": addr(name, bid if slot is None else slot), "cluster": cluster}),
        name, st.integers(0, 2), st.sampled_from([None, None, 0, 1, 2]), st.sampled_from(["C1", "C1", "C1", "C2"]))
    # Time moves in coarse steps so that "last + timeout == now" (not yet expired) happens often.
    advance = st.builds(lambda ms: ("advance", {"ms": ms}), st.sampled_from([500, 1000, 1500, 3000, 4000]))
    perm = st.builds(lambda kind, name: (kind, {"name": name}), st.sampled_from(["wipe", "add"]), name)
    delete_topic = st.builds(lambda topic, cluster: ("delete_topic", {"topic": topic, "cluster": cluster}),
                             st.sampled_from(TOPICS), st.sampled_from([None, "C1", "C2"]))
    register_topic = st.builds(
        lambda topic, qds: ("register_topic", {"topic": topic, "queueDatas": [
            {"brokerName": n, "readQueueNums": q["read"], "writeQueueNums": q["write"], "perm": q["perm"],
             "topicSysFlag": q["sys_flag"]} for n, q in qds.items()]}),
        st.sampled_from(TOPICS + ["T9"]),
        st.dictionaries(st.sampled_from(names + ["ghost"]), queue, min_size=1, max_size=3))
    kv_put = st.builds(lambda ns, k, v: ("kv_put", {"ns": ns, "key": k, "value": v}),
                       st.sampled_from(NAMESPACES), st.sampled_from(["T0", "k1"]), st.sampled_from(["b0:4", "x"]))
    kv_delete = st.builds(lambda ns, k: ("kv_delete", {"ns": ns, "key": k}),
                          st.sampled_from(NAMESPACES), st.sampled_from(["T0", "k1"]))
    # a registration sent again unchanged, published as a repeat naming the earlier one (the
    # remoting front's way): `pick` chooses which of the workload's registrations so far
    repeat = st.builds(lambda pick: ("repeat", {"pick": pick}), st.integers(0, 50))
    return st.one_of(register, register, register, heartbeat, unregister, unregister, advance, perm,
                     delete_topic, register_topic, kv_put, kv_delete, repeat, repeat)


config = st.builds(lambda k, v: ("config", {"key": k, "value": v}),
                   st.sampled_from(sorted(ev.RUNTIME_SWITCHES)), st.booleans())
_steps = st.sampled_from([0, 250, 500, 1000, 1500])
workload = st.one_of(
    st.lists(st.tuples(operations(NAMES), _steps), min_size=5, max_size=40),
    st.lists(st.tuples(operations(NAMES[:1]), _steps), min_size=5, max_size=30),  # one group: switches, acting master
)


def broker_event(kind: str, a: dict[str, Any], *, timestamp: int | None = None) -> dict[str, Any]:
    """The contract event for a broker-side op (register/heartbeat/unregister/wipe/add)."""
    if kind == "register":
        e = ev.register_broker_event(
            cluster=a["cluster"], broker_name=a["name"], broker_id=a["id"], addr=a["addr"], topics=a["topics"],
            data_version={"timestamp": 1, "counter": a["counter"], "stateVersion": a["sv"]},
            timeout_ms=a["timeout"], enable_acting_master=a["acting"], zone=a["zone"], filter_servers=a["filters"],
            ha_addr=a["addr"].replace(":10911", ":10912"))
        if a["acting"] is None:
            e.pop("enableActingMaster")
    elif kind == "heartbeat":
        e = ev.heartbeat_event(cluster=a["cluster"], broker_name=a["name"], broker_id=0, addr=a["addr"])
    elif kind == "unregister":
        e = ev.unregister_broker_event(cluster=a["cluster"], broker_name=a["name"], broker_id=a["id"], addr=a["addr"])
    elif kind == "wipe":
        e = ev.wipe_write_perm_event(a["name"])
    elif kind == "add":
        e = ev.add_write_perm_event(a["name"])
    elif kind == "kv_put":
        e = ev.put_kv_event(a["ns"], a["key"], a["value"])
    elif kind == "kv_delete":
        e = ev.delete_kv_event(a["ns"], a["key"])
    elif kind == "config":
        e = ev.update_config_event(a["key"], "true" if a["value"] else "false")
    else:
        raise ValueError(kind)
    if timestamp is not None:
        e["timestamp"] = timestamp
    return e


def published(kind: str, a: dict[str, Any], event: dict[str, Any]) -> list[dict[str, Any]]:
    """What the broker publishes for `event`: itself, or its chunks when the op says so."""
    if kind != "register" or not a.get("chunked") or len(event["topicConfigTable"]) < 2:
        return [event]
    header = len(ev.encode({**event, "topicConfigTable": {}})[1])
    return ev.chunk_registration(event, header + 160)  # room for about one topic per chunk
