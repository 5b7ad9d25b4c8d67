"""The applyInPandasWithState core (pipelines.step.run_group): decode, order, dispatch, encode."""

from __future__ import annotations

import json

from pipelines.step import StepConfig, run_group
from pipelines.step_rows import DEAD_LETTER, DEADLINE, REJECTED, changes_of
from routeinfo.state import GroupState
from schemas import events as ev
from schemas import tables as t
from tests.helpers import reg, routing_config, topics

CFG = StepConfig(routing_config(default_timeout_ms=10_000), max_message_bytes=1 << 20,
                 max_clock_skew_ms=60_000)
T0 = 1_700_000_000_000


def record(event_or_bytes, offset, key="broker-a", partition=0, ts=T0):
    value = event_or_bytes if isinstance(event_or_bytes, bytes) else ev.encode(event_or_bytes)[1]
    return {"partition": partition, "offset": offset, "timestamp": ts, "key": key, "value": value}


def by_table(rows):
    return {r["target"]: r for r in rows}


def test_records_are_applied_in_offset_order():
    recs = [record(reg("broker-a", 0, "10.0.0.1:1", tps=topics("Base", "T", read=2), counter=2), 5),
            record(reg("broker-a", 0, "10.0.0.1:1", tps=topics("Base", "T", read=1), counter=1), 4)]
    _state, deadline, rows = run_group("broker-a", recs, None, T0, CFG)
    queue_rows = json.loads(by_table(rows)[t.TOPIC_QUEUE.name]["body"])
    assert {r["topic"]: r["readQueueNums"] for r in queue_rows}["T"] == 2
    assert deadline == T0 + 10_001


def test_bad_records_become_dead_letters_and_valid_ones_still_apply():
    recs = [record(b"garbage", 1), record(reg("broker-a", 0, "10.0.0.1:1"), 2),
            record(reg("broker-b", 0, "10.0.0.2:1"), 3)]  # key says broker-a, body broker-b
    state, _, rows = run_group("broker-a", recs, None, T0, CFG)
    dead = [r for r in rows if r["target"] == DEAD_LETTER]
    assert [(d["offset"], d["raw"]) for d in dead] == [(1, b"garbage"), (3, recs[2]["value"])]
    assert "not JSON" in dead[0]["body"] and "Kafka key" in dead[1]["body"]
    assert GroupState.from_parts(*state).broker.addrs == {0: "10.0.0.1:1"}


def test_rejections_are_reported_and_leave_no_state():
    state, deadline, rows = run_group("broker-a", [record(reg("broker-a", 0, "10.0.0.1:1", tps=topics("One")), 0)],
                                      None, T0, CFG)
    assert state is None and deadline is None
    assert [r["target"] for r in rows] == [REJECTED, t.ROUTE_CHANGES.name, DEADLINE]
    assert rows[2]["body"] == ""  # no state, no timeout: the sink forgets the group
    change = changes_of(rows[1]["body"])[0]
    assert change["kind"] == "REGISTRATION_REJECTED" and (change["partition"], change["offset"]) == (0, 0)


def test_timeout_call_without_records_expires():
    state, _, _ = run_group("broker-a", [record(reg("broker-a", 0, "10.0.0.1:1"), 0)], None, T0, CFG)
    state2, deadline, rows = run_group("broker-a", [], state, T0 + 10_001, CFG)
    assert state2 is None and deadline is None
    assert {r["target"]: r["body"] for r in rows}[t.BROKER_ADDR.name] == "[]"


def test_quiet_call_emits_only_its_deadline():
    state, _, _ = run_group("broker-a", [record(reg("broker-a", 0, "10.0.0.1:1"), 0)], None, T0, CFG)
    state2, deadline, rows = run_group("broker-a", [], state, T0 + 5, CFG)
    assert (state2, deadline) == (state, T0 + 10_001)
    assert [(r["target"], r["owner"], r["body"]) for r in rows] == [(DEADLINE, "broker-a", str(T0 + 10_001))]


def test_kv_group():
    put = {"type": "PUT_KV_CONFIG", "namespace": "ns", "key": "k", "value": "v"}
    _state, deadline, rows = run_group("kv/ns", [record(put, 0, key="kv/ns")], None, T0, CFG)
    assert deadline is None and json.loads(rows[0]["body"]) == [{"namespace": "ns", "key": "k", "value": "v"}]
    assert rows[0]["target"] == t.KV_CONFIG.name and rows[0]["owner"] == "ns"


def test_config_group_keeps_allow_listed_switches():
    upd = ev.update_config_event("enableTopicList", "false")
    bad = ev.update_config_event("configStorePath", "/etc/cron.d/x")
    _state, _, rows = run_group(ev.CONFIG_KEY, [record(upd, 0, key=ev.CONFIG_KEY), record(bad, 1, key=ev.CONFIG_KEY)],
                               None, T0, CFG)
    by = {r["target"]: r for r in rows}
    assert json.loads(by[t.NAMESRV_CONFIG.name]["body"]) == [
        {"scope": "namesrv", "key": "enableTopicList", "value": "false"}]
    assert "not an updatable runtime switch" in by[DEAD_LETTER]["body"]


def test_null_key_group_only_dead_letters():
    state, _, rows = run_group(None, [record(reg("broker-a", 0, "10.0.0.1:1"), 0, key=None)], None, T0, CFG)
    assert state is None and [r["target"] for r in rows] == [DEAD_LETTER]


def test_changes_carry_their_event_coordinates_and_heartbeats_add_none():
    recs = [record(reg("broker-a", 0, "10.0.0.1:1", tps=topics("Base", "T")), 7),
            record(ev.heartbeat_event(cluster="DefaultCluster", broker_name="broker-a", broker_id=0,
                                      addr="10.0.0.1:1"), 8)]
    state, _, rows = run_group("broker-a", recs, None, T0, CFG)
    changes = changes_of(by_table(rows)[t.ROUTE_CHANGES.name]["body"])
    assert [(c["kind"], c["topic"], c["offset"]) for c in changes] == [
        ("CLUSTER_JOINED", None, 7), ("BROKER_REGISTERED", None, 7), ("QUEUE_ADDED", "Base", 7),
        ("QUEUE_ADDED", "T", 7)]
    _, _, rows = run_group("broker-a", [record(ev.heartbeat_event(
        cluster="DefaultCluster", broker_name="broker-a", broker_id=0, addr="10.0.0.1:1"), 9, ts=T0 + 5)],
        state, T0 + 5, CFG)
    assert t.ROUTE_CHANGES.name not in by_table(rows)


# ---------------------------------------------------------------- stale removals (issue 25, item 4)

def _unreg(offset_of_registration=None):
    return ev.unregister_broker_event(cluster="DefaultCluster", broker_name="broker-a", broker_id=0,
                                      addr="10.0.0.1:1", registration_offset=offset_of_registration)


def _addrs(state):
    return None if state is None else GroupState.from_parts(*state).broker.addrs


def test_a_closed_connections_unregistration_leaves_a_newer_registration_of_the_address():
    """The broker reconnected (another front) and registered again at offset 11 before the old
    connection's close, which undoes the registration at offset 10, was applied."""
    again = [record(reg("broker-a", 0, "10.0.0.1:1"), 10), record(reg("broker-a", 0, "10.0.0.1:1"), 11)]
    state, _, _ = run_group("broker-a", [*again, record(_unreg(10), 12)], None, T0, CFG)
    assert _addrs(state) == {0: "10.0.0.1:1"}
    # in separate batches, and across the state's encoding, alike
    state, _, _ = run_group("broker-a", again, None, T0, CFG)
    state, _, _ = run_group("broker-a", [record(_unreg(10), 12)], state, T0 + 5, CFG)
    assert _addrs(state) == {0: "10.0.0.1:1"}


def test_an_unregistration_of_the_newest_registration_or_of_none_in_particular_applies():
    state, _, _ = run_group("broker-a", [record(reg("broker-a", 0, "10.0.0.1:1"), 10),
                                         record(reg("broker-a", 0, "10.0.0.1:1"), 11)], None, T0, CFG)
    for undoes in (11, None):
        after, _, _ = run_group("broker-a", [record(_unreg(undoes), 12)], state, T0 + 5, CFG)
        assert after is None, undoes


def test_state_written_before_the_guard_reads_and_applies_every_unregistration():
    """A live entry stored without its registration's offset (state from before this field) has
    none to compare: every unregistration applies, as before."""
    state, _, _ = run_group("broker-a", [record(reg("broker-a", 0, "10.0.0.1:1"), 10)], None, T0, CFG)
    core = json.loads(state[0])
    core["live"] = [row[:-1] for row in core["live"]]
    after, _, _ = run_group("broker-a", [record(_unreg(3), 12)], (json.dumps(core), state[1]), T0 + 5, CFG)
    assert after is None


def test_an_expiry_due_in_the_batch_of_a_re_registration_keeps_the_fresh_entry():
    """Expiry is decided in the same step as the records, before each record at its time: a
    broker that was due and re-registered in the same batch is expired, then registered anew."""
    state, _, _ = run_group("broker-a", [record(reg("broker-a", 0, "10.0.0.1:1"), 0)], None, T0, CFG)
    late = T0 + 10_500
    after, deadline, rows = run_group("broker-a", [record(reg("broker-a", 0, "10.0.0.1:1"), 1, ts=late)], state,
                                      late + 100, CFG)
    assert _addrs(after) == {0: "10.0.0.1:1"} and deadline == late + 10_001
    kinds = [c["kind"] for c in changes_of(by_table(rows)[t.ROUTE_CHANGES.name]["body"])]
    assert kinds.index("BROKER_EXPIRED") < kinds.index("BROKER_REGISTERED")


# ---------------------------------------------------------------- repeated registrations (published small)

def _repeat_of(full, offsets, ts):
    from routeinfo.state import topic_keys_digest
    return ev.repeated_registration_event(full, offsets, topic_keys_digest(full["topicConfigTable"]), timestamp=ts)


def test_a_repeat_of_a_live_registration_refreshes_it_without_its_body():
    full = reg("broker-a", 0, "10.0.0.1:1", tps=topics("Base", "T"))
    state, _, _ = run_group("broker-a", [record({**full, "timestamp": T0}, 0)], None, T0, CFG)

    def fetch(partition, offsets):
        raise AssertionError("a pure liveness repeat must not read the log")
    later = T0 + 5_000
    new, deadline, rows = run_group("broker-a", [record(_repeat_of(full, [0], later), 1, ts=later)], state, later,
                                    CFG, fetch=fetch)
    assert GroupState.from_parts(*new).live[("DefaultCluster", "10.0.0.1:1")].last_update == later
    assert deadline == later + 10_001
    assert not [r for r in rows if r["target"] in (DEAD_LETTER, t.TOPIC_QUEUE.name)]


def test_a_repeat_after_the_broker_expired_registers_it_again_from_the_body_it_names():
    full = reg("broker-a", 0, "10.0.0.1:1", tps=topics("Base", "T"))
    log = {0: ev.encode({**full, "timestamp": T0})[1]}
    state, _, _ = run_group("broker-a", [record(log[0], 0)], None, T0, CFG)
    later = T0 + 60_000  # past the 10 s timeout: expired before the repeat applies
    asked = []

    def fetch(partition, offsets):
        asked.append((partition, offsets))
        return [log.get(o) for o in offsets]
    new, _, rows = run_group("broker-a", [record(_repeat_of(full, [0], later), 7, ts=later)], state, later, CFG,
                             fetch=fetch)
    assert asked == [(0, [0])]
    assert not [r for r in rows if r["target"] == DEAD_LETTER]
    st = GroupState.from_parts(*new)
    assert st.broker.addrs == {0: "10.0.0.1:1"} and set(st.topics) == {"Base", "T"}
    assert st.live[("DefaultCluster", "10.0.0.1:1")].last_update == later


def test_a_repeat_whose_body_is_gone_or_changed_is_dead_lettered_with_the_reason():
    full = reg("broker-a", 0, "10.0.0.1:1", tps=topics("Base", "T"))
    other = reg("broker-a", 0, "10.0.0.1:1", tps=topics("Base", "U"))
    for log, why in (({}, "no longer in the event log"),
                     ({0: ev.encode({**other, "timestamp": T0})[1]}, "other topics than the one repeated"),
                     ({0: b"{}"}, "not the registration it repeats")):
        later = T0 + 60_000
        new, _, rows = run_group("broker-a", [record(_repeat_of(full, [0], later), 7, ts=later)], None, later, CFG,
                                 fetch=lambda p, offsets, log=log: [log.get(o) for o in offsets])
        dead = [r for r in rows if r["target"] == DEAD_LETTER]
        assert new is None and len(dead) == 1 and dead[0]["offset"] == 7, (why, rows)
        assert why in dead[0]["body"] and "not applied" in dead[0]["body"], dead[0]["body"]


def test_a_repeat_carries_no_topic_table():
    small = _repeat_of(reg("broker-a", 0, "10.0.0.1:1", tps=topics("Base", "T")), [3], T0)
    assert "topicConfigTable" not in small and small["repeats"]["offsets"] == [3]
    bad = {**small, "topicConfigTable": {}}
    _, _, rows = run_group("broker-a", [record(bad, 0)], None, T0, CFG)
    assert "carries no topicConfigTable" in rows[0]["body"]
