"""The pure RouteInfoManager (routeinfo: route_manager, route_writes, housekeeping), rule by rule, without Spark."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from routeinfo import housekeeping, route_manager
from routeinfo.state import GroupState, table_rows
from schemas import events as ev
from schemas import tables as t
from tests.helpers import CLUSTER, hb, norm, reg, routing_config, topics, unreg

CFG = routing_config(default_timeout_ms=120_000)
A0, A1, A2 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"


def run(*steps, state=None, now=None, cfg=CFG):
    """steps: (event, time_ms) pairs applied in one call; now defaults to the last event time."""
    events = [norm(e, ts) for e, ts in steps]
    now = now if now is not None else (steps[-1][1] if steps else 0)
    return route_manager.apply(state, events, now, cfg)


def rows(state, table):
    return table_rows(state, table.name)


def queues(state):
    return {r["topic"]: (r["readQueueNums"], r["writeQueueNums"], r["perm"]) for r in rows(state, t.TOPIC_QUEUE)}


def addrs(state):
    return {r["brokerId"]: r["brokerAddr"] for r in rows(state, t.BROKER_ADDR)}


# ---------------------------------------------------------------- registration

def test_first_registration_fills_every_table():
    s, res = run((reg("broker-a", 0, A0, filters=["10.0.0.9:1"], ha="10.0.0.1:10912", timeout_ms=30_000), 1000))
    assert rows(s, t.CLUSTER_ADDR) == [{"clusterName": CLUSTER, "brokerName": "broker-a"}]
    assert rows(s, t.BROKER_ADDR) == [{"brokerName": "broker-a", "cluster": CLUSTER, "brokerId": 0, "brokerAddr": A0,
                                       "zoneName": None, "enableActingMaster": False}]
    assert queues(s) == {"Base": (8, 8, 6), "TopicTest": (8, 8, 6)}
    live = rows(s, t.BROKER_LIVE)
    assert len(live) == 1 and live[0]["lastUpdateTimestamp"] == 1000 and live[0]["heartbeatTimeoutMillis"] == 30_000
    assert live[0]["haServerAddr"] == "10.0.0.1:10912" and live[0]["brokerId"] == 0
    assert rows(s, t.FILTER_SERVER) == [{"clusterName": CLUSTER, "brokerAddr": A0, "brokerName": "broker-a",
                                         "filterServer": ["10.0.0.9:1"]}]
    assert res.dirty_tables == {x.name for x in t.ROUTE_TABLES}


def test_default_timeout_comes_from_config():
    s, _ = run((reg("b", 0, A0), 0), cfg=routing_config(default_timeout_ms=7000))
    assert rows(s, t.BROKER_LIVE)[0]["heartbeatTimeoutMillis"] == 7000


def test_slave_adds_address_but_not_topics():
    s, _ = run((reg("b", 0, A0, tps=topics("Base", "T1")), 0),
               (reg("b", 1, A1, tps=topics("Base", "T1", "OnlyOnSlave")), 10))
    assert addrs(s) == {0: A0, 1: A1}
    assert set(queues(s)) == {"Base", "T1"}


def test_master_slave_switch_one_address_one_id():
    s, _ = run((reg("b", 0, A0), 0), (reg("b", 1, A1), 1))
    s, _ = run((unreg("b", 0, A0), 2), state=s)
    s, _ = run((reg("b", 0, A1), 3), state=s)  # the slave comes back as master
    assert addrs(s) == {0: A1}


def test_unchanged_data_version_keeps_queue_counts_but_adds_new_topics():
    s, _ = run((reg("b", 0, A0, tps=topics("Base", "T", read=8, write=8), counter=1), 0))
    s, _ = run((reg("b", 0, A0, tps={**topics("Base", "T", read=16, write=16), **topics("New")}, counter=1), 5),
               state=s)
    q = queues(s)
    assert q["T"] == (8, 8, 6) and q["Base"] == (8, 8, 6)
    assert q["New"] == (8, 8, 6)


def test_new_data_version_updates_queue_counts():
    s, _ = run((reg("b", 0, A0, tps=topics("Base", "T", read=8, write=8), counter=1), 0))
    s, res = run((reg("b", 0, A0, tps=topics("Base", "T", read=16, write=4), counter=2), 5), state=s)
    assert queues(s)["T"] == (16, 4, 6)
    assert t.TOPIC_QUEUE.name in res.dirty_tables


def test_re_registration_keeps_topics_missing_from_the_table_by_default():
    s, _ = run((reg("b", 0, A0, tps=topics("Base", "Gone"), counter=1), 0))
    s, _ = run((reg("b", 0, A0, tps=topics("Base", "Other"), counter=2), 1), state=s)
    assert set(queues(s)) == {"Base", "Gone", "Other"}


def test_delete_topic_with_broker_registration_prunes_missing_topics():
    cfg = routing_config(delete_topic_with_broker_registration=True)
    s, _ = run((reg("b", 0, A0, tps=topics("Base", "Gone"), counter=1), 0), cfg=cfg)
    s, _ = run((reg("b", 0, A0, tps=topics("Base", "Other"), counter=1), 1), state=s, cfg=cfg)
    assert set(queues(s)) == {"Base", "Other"}


def test_filter_server_list_absent_keeps_empty_removes():
    s, _ = run((reg("b", 0, A0, filters=["10.0.0.9:1"]), 0))
    s, _ = run((reg("b", 0, A0, filters=None), 1), state=s)
    assert len(rows(s, t.FILTER_SERVER)) == 1
    s, _ = run((reg("b", 0, A0, filters=[]), 2), state=s)
    assert rows(s, t.FILTER_SERVER) == []


def test_broker_moving_cluster_stays_listed_in_the_old_one():
    s, _ = run((reg("b", 0, A0, cluster="C1"), 0), (reg("b", 0, A0, cluster="C2"), 1))
    assert {r["clusterName"] for r in rows(s, t.CLUSTER_ADDR)} == {"C1", "C2"}
    assert rows(s, t.BROKER_ADDR)[0]["cluster"] == "C1"  # BrokerData.cluster is not updated


def test_stale_registration_of_a_new_address_is_refused_and_changes_nothing_else():
    s, _ = run((reg("b", 0, A0, state_version=5), 0))
    before = s.to_json()
    s, res = run((reg("b", 0, A1, state_version=4, cluster=CLUSTER), 1), state=s)
    assert res.rejected and "stale" in res.rejected[0]
    assert s.to_json() == before
    assert addrs(s) == {0: A0}


def test_stale_registration_drops_the_address_from_its_other_id_and_the_live_table():
    """Audit D4 (RocketMQ RouteInfoManager: removeIf same address, then "Remove the rejected
    brokerAddr from brokerLiveTable"): the slave that claims id 0 with an old epoch is gone."""
    s, _ = run((reg("b", 0, A0, state_version=5), 0), (reg("b", 1, A1, state_version=4), 1))
    s, res = run((reg("b", 0, A1, state_version=4, zone="z9", acting=True), 2), state=s)
    assert res.rejected and "stale" in res.rejected[0]
    assert addrs(s) == {0: A0}
    assert [r["brokerAddr"] for r in rows(s, t.BROKER_LIVE)] == [A0]
    bd = rows(s, t.BROKER_ADDR)[0]
    assert (bd["zoneName"], bd["enableActingMaster"]) == ("z9", True)  # set before the check, as in RocketMQ
    assert [c["kind"] for c in res.changes] == ["BROKER_UNREGISTERED", "REGISTRATION_REJECTED"]


def test_newer_epoch_takes_over_the_id():
    s, _ = run((reg("b", 0, A0, state_version=5), 0), (reg("b", 0, A1, state_version=6), 1))
    assert addrs(s) == {0: A1}


def test_single_topic_registration_of_unknown_broker_is_rejected_and_leaves_nothing():
    s, res = run((reg("b", 0, A0, tps=topics("Only")), 0))
    assert s is None and res.rejected and "register broker failed" in res.rejected[0]


def test_single_topic_registration_of_known_broker_is_accepted():
    s, _ = run((reg("b", 0, A0), 0), (reg("b", 0, A0, tps=topics("Only"), counter=2), 1))
    assert "Only" in queues(s)


def test_prime_slave_supplies_read_only_topics_when_acting_master():
    s, _ = run((reg("b", 1, A1, acting=True, tps=topics("Base", "T")), 0))
    assert queues(s)["T"] == (8, 8, 4)


def test_old_version_slave_never_supplies_topics():
    s, _ = run((reg("b", 1, A1, acting=None, tps=topics("Base", "T")), 0))
    assert queues(s) == {} and addrs(s) == {1: A1}


def test_zone_and_acting_flag_are_last_writer_wins():
    s, _ = run((reg("b", 0, A0, zone="z1", acting=True), 0), (reg("b", 1, A1, zone="z2", acting=False), 1))
    r = rows(s, t.BROKER_ADDR)[0]
    assert (r["zoneName"], r["enableActingMaster"]) == ("z2", False)


# ---------------------------------------------------------------- liveness and removal

def test_heartbeat_refreshes_only_last_update():
    exact = routing_config(live_flush_ms=0)
    s, _ = run((reg("b", 0, A0, timeout_ms=5000), 0), cfg=exact)
    before = rows(s, t.BROKER_LIVE)[0]
    s, res = run((hb("b", 0, A0), 4000), state=s, cfg=exact)
    after = rows(s, t.BROKER_LIVE)[0]
    assert after["lastUpdateTimestamp"] == 4000
    assert {**after, "lastUpdateTimestamp": 0} == {**before, "lastUpdateTimestamp": 0}
    assert res.dirty_tables == {t.BROKER_LIVE.name} and not res.changes


def test_heartbeats_reach_broker_live_once_per_flush_window():
    cfg = routing_config(live_flush_ms=60_000)
    s, _ = run((reg("b", 0, A0, timeout_ms=100_000), 1000), cfg=cfg)
    s, res = run((hb("b", 0, A0), 30_000), state=s, cfg=cfg)
    assert not res.dirty_tables and rows(s, t.BROKER_LIVE)[0]["lastUpdateTimestamp"] == 1000
    assert housekeeping.next_deadline(s, cfg) == 60_000  # called back at the window boundary
    s, res = run((reg("b", 0, A0, timeout_ms=100_000), 40_000), state=s, cfg=cfg)  # unchanged re-registration
    assert not res.dirty_tables
    s, res = route_manager.apply(s, [], 60_000, cfg)
    assert res.dirty_tables == {t.BROKER_LIVE.name} and rows(s, t.BROKER_LIVE)[0]["lastUpdateTimestamp"] == 40_000
    s2, _ = route_manager.apply(s, [], 70_000, cfg)
    assert housekeeping.next_deadline(s2, cfg) == 140_001  # nothing stale: only the expiry
    # ...but expiry always uses the exact time
    s3, res = route_manager.apply(s, [], 140_001, cfg)
    assert s3 is None and res.expired == [(CLUSTER, A0)]


def test_a_changed_registration_materializes_at_once():
    cfg = routing_config(live_flush_ms=60_000)
    s, _ = run((reg("b", 0, A0, counter=1), 1000), cfg=cfg)
    s, res = run((reg("b", 0, A0, counter=2), 2000), state=s, cfg=cfg)
    live = rows(s, t.BROKER_LIVE)[0]
    assert t.BROKER_LIVE.name in res.dirty_tables and live["lastUpdateTimestamp"] == 2000
    assert '"counter":2' in live["dataVersion"]


def test_heartbeat_of_unknown_broker_is_a_no_op():
    s, res = run((hb("nobody", 0, A0), 0))
    assert s is None and not res.dirty_tables


def test_expiry_after_timeout_removes_the_group_and_its_queues():
    s, _ = run((reg("b", 0, A0, timeout_ms=5000), 0))
    s2, res = route_manager.apply(s, [], 5000, CFG)
    assert s2 is not None and not res.expired  # last + timeout == now is not yet expired
    s3, res = route_manager.apply(s2, [], 5001, CFG)
    assert s3 is None and res.expired == [(CLUSTER, A0)]
    assert res.dirty_tables == {x.name for x in t.ROUTE_TABLES} - {t.FILTER_SERVER.name}  # it had no filter servers


def test_expiry_of_slave_keeps_group_queues():
    s, _ = run((reg("b", 0, A0, timeout_ms=100_000), 0), (reg("b", 1, A1, timeout_ms=1000), 0))
    s, _ = route_manager.apply(s, [], 2000, CFG)
    assert addrs(s) == {0: A0} and "TopicTest" in queues(s)


def test_expiry_is_checked_before_each_event():
    # A heartbeat arriving after the timeout cannot revive an entry that had expired.
    s, res = run((reg("b", 0, A0, timeout_ms=1000), 0), (hb("b", 0, A0), 5000))
    assert s is None and res.expired == [(CLUSTER, A0)]


def test_batch_boundaries_do_not_change_the_outcome():
    exact = routing_config(live_flush_ms=0)
    steps = [(reg("b", 0, A0, timeout_ms=1000), 0), (reg("b", 1, A1, timeout_ms=9000), 10),
             (hb("b", 1, A1), 3000), (reg("b", 0, A0, timeout_ms=1000), 4000)]
    whole, _ = run(*steps, now=4500, cfg=exact)
    s = None
    for step in steps:
        s, _ = run(step, state=s, cfg=exact)
    s, _ = route_manager.apply(s, [], 4500, exact)
    assert whole.to_json() == s.to_json()


def test_unregister_removes_by_address_and_takes_effect_immediately():
    s, _ = run((reg("b", 0, A0), 0), (reg("b", 1, A1), 1))
    s, _ = run((unreg("b", 7, A1), 2), state=s)  # wrong id: 5.x removes by address
    assert addrs(s) == {0: A0}
    assert [r["brokerAddr"] for r in rows(s, t.BROKER_LIVE)] == [A0]


def test_last_address_gone_removes_queues_and_cluster_membership():
    s, _ = run((reg("a", 0, A0), 0))
    s, _ = run((unreg("a", 0, A0), 1), state=s)
    assert s is None


def test_queues_stay_while_any_address_is_left():
    s, _ = run((reg("a", 0, A0), 0), (reg("a", 1, A1), 1), (unreg("a", 0, A0), 2))
    assert queues(s) == {"Base": (8, 8, 6), "TopicTest": (8, 8, 6)}


def test_acting_master_group_losing_its_master_turns_read_only():
    s, _ = run((reg("a", 0, A0, acting=True), 0), (reg("a", 1, A1, acting=True), 1), (unreg("a", 0, A0), 2))
    assert {p for _, _, p in queues(s).values()} == {4}


def test_address_replaced_by_switch_rule_still_expires():
    # RocketMQ never expires such an entry (quirk 14.9); we do.
    s, _ = run((reg("a", 1, A1, timeout_ms=1000), 0), (reg("a", 0, A1, timeout_ms=100_000, cluster="Other"), 0))
    s, res = route_manager.apply(s, [], 5000, CFG)
    assert (CLUSTER, A1) in res.expired
    assert all(r["clusterName"] != CLUSTER for r in rows(s, t.BROKER_LIVE))


def test_unregister_of_unknown_broker_changes_nothing():
    s, res = run((unreg("x", 0, A0), 0))
    assert s is None and not res.dirty_tables


def test_next_deadline_is_just_after_the_earliest_expiry():
    s, _ = run((reg("a", 0, A0, timeout_ms=5000), 100), (reg("a", 1, A1, timeout_ms=2000), 200))
    assert housekeeping.next_deadline(s, CFG) == 2201
    assert housekeeping.next_deadline(None, CFG) is None


# ---------------------------------------------------------------- admin commands

def _admin(etype, **fields):
    return {"type": etype, **fields}


def test_wipe_and_add_write_perm_arithmetic_and_counts():
    s, _ = run((reg("a", 0, A0, tps={**topics("Base", perm=7), **topics("RO", perm=4)}), 0))
    s, res = run((_admin(ev.WIPE_WRITE_PERM_OF_BROKER, brokerName="a"), 1), state=s)
    assert res.perm_topic_counts == [2] and {k: p for k, (_, _, p) in queues(s).items()} == {"Base": 5, "RO": 4}
    s, res = run((_admin(ev.ADD_WRITE_PERM_OF_BROKER, brokerName="a"), 2), state=s)
    assert res.perm_topic_counts == [2] and {p for _, _, p in queues(s).values()} == {6}


def test_delete_topic_global_and_by_cluster():
    s, _ = run((reg("a", 0, A0, tps=topics("Base", "T1", "T2")), 0))
    s, _ = run((_admin(ev.DELETE_TOPIC_IN_NAMESRV, brokerName="a", topic="T1", clusterName="Elsewhere"), 1), state=s)
    assert "T1" in queues(s)
    s, _ = run((_admin(ev.DELETE_TOPIC_IN_NAMESRV, brokerName="a", topic="T1", clusterName=CLUSTER), 2), state=s)
    s, _ = run((_admin(ev.DELETE_TOPIC_IN_NAMESRV, brokerName="a", topic="T2"), 3), state=s)
    assert set(queues(s)) == {"Base"}


def test_register_topic_needs_a_known_broker():
    e = _admin(ev.REGISTER_TOPIC_IN_NAMESRV, brokerName="a", topic="New", readQueueNums=2, writeQueueNums=2,
               perm=6, topicSysFlag=0)
    s, _ = run((e, 0))
    assert s is None
    s, _ = run((reg("a", 0, A0), 0), (e, 1))
    assert queues(s)["New"] == (2, 2, 6)


# ---------------------------------------------------------------- state encoding

def test_state_json_round_trip():
    s, _ = run((reg("a", 0, A0, filters=["10.0.0.9:1"], zone="z", acting=True), 0), (reg("a", 1, A1), 1))
    again = GroupState.from_json(s.to_json())
    assert again == s and again.to_json() == s.to_json()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["reg0", "reg1", "hb0", "hb1", "un0", "un1"]),
                          st.integers(0, 3000)), max_size=12),
       st.integers(0, 12))
def test_any_split_into_batches_gives_the_same_state(ops, cut):
    """Deterministic and batch-independent: the property the sink's replay safety relies on."""
    make = {"reg0": lambda: reg("g", 0, A0, timeout_ms=1000), "reg1": lambda: reg("g", 1, A1, timeout_ms=2000),
            "hb0": lambda: hb("g", 0, A0), "hb1": lambda: hb("g", 1, A1),
            "un0": lambda: unreg("g", 0, A0), "un1": lambda: unreg("g", 1, A1)}
    times, now = [], 0
    for _, dt in ops:
        now += dt
        times.append(now)
    steps = [(make[name](), ts) for (name, _), ts in zip(ops, times, strict=False)]
    end = now + 500
    exact = routing_config(live_flush_ms=0)  # broker_live's flush windows are batch-dependent by design
    whole, _ = run(*steps, now=end, cfg=exact) if steps else route_manager.apply(None, [], end, exact)
    cut = min(cut, len(steps))
    first, _ = run(*steps[:cut], now=times[cut - 1], cfg=exact) if cut else (None, None)
    second, _ = (run(*steps[cut:], state=first, now=end, cfg=exact) if steps[cut:]
                 else route_manager.apply(first, [], end, exact))
    assert (whole.to_json() if whole else None) == (second.to_json() if second else None)


def test_address_taking_a_new_id_counts_as_first_registration():
    # The id is new in brokerAddrs, so its topics are taken even with an unchanged data version.
    s, _ = run((reg("b", 0, A0, tps=topics("Base", "T", read=8), counter=1, acting=False), 0))
    s, _ = run((reg("b", 1, A0, tps=topics("Base", "T", read=2), counter=1, acting=False), 1), state=s)
    assert addrs(s) == {1: A0} and queues(s)["T"] == (2, 8, 6)
