"""routeinfo.risks on hand-built cuts (no Spark, no Kafka): each kind appears and clears, ids stay
the same across cuts, `since` is the start of the uninterrupted run, the three ways a cut's topics
are read agree, and the tracker folded over random cuts agrees with a recomputation from scratch."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from routeinfo import risks
from routeinfo.risks import Cut, RiskTracker, Settings
from routeinfo.snapshot import Snapshot, build_snapshot
from schemas import tables as t
from snapshots import cutfile, mapped

T0 = 1_800_000_000_000
HOUR = 3_600_000


# ---------------------------------------------------------------- building cuts


@dataclasses.dataclass
class Group:
    name: str
    master: bool = True
    slaves: int = 1                 # slave addresses in broker_addr (ids 1..n)
    live_slaves: int | None = None  # of which live (default: all)
    zone: str | None = None
    cluster: str = "C"
    counter: int = 1                # every live address's DataVersion counter
    state_version: int = 0
    timestamp: int = 1

    def addrs(self) -> dict[int, str]:
        out = {0: f"{self.name}:10911"} if self.master else {}
        out.update({i: f"{self.name}-s{i}:10911" for i in range(1, self.slaves + 1)})
        return out


def dv(g: Group) -> str:
    return json.dumps({"counter": g.counter, "stateVersion": g.state_version, "timestamp": g.timestamp})


def tables(groups: list[Group], queues: dict[str, dict[str, int]], *, write_queues: int = 8) -> dict[str, Any]:
    """`queues`: topic -> {group: perm}."""
    out: dict[str, Any] = {x.name: [] for x in t.STATE_TABLES}
    for g in groups:
        live_slaves = g.slaves if g.live_slaves is None else g.live_slaves
        for bid, addr in g.addrs().items():
            out["broker_addr"].append({"brokerName": g.name, "cluster": g.cluster, "brokerId": bid, "brokerAddr": addr,
                                       "zoneName": g.zone, "enableActingMaster": False})
            if bid == 0 or bid <= live_slaves:
                out["broker_live"].append({"clusterName": g.cluster, "brokerAddr": addr, "brokerName": g.name,
                                           "brokerId": bid, "lastUpdateTimestamp": 1, "heartbeatTimeoutMillis": 120_000,
                                           "dataVersion": dv(g), "haServerAddr": None})
        out["cluster_addr"].append({"clusterName": g.cluster, "brokerName": g.name})
    for topic, perms in queues.items():
        for name, perm in perms.items():
            out["topic_queue"].append({"topic": topic, "brokerName": name, "readQueueNums": 8,
                                       "writeQueueNums": write_queues, "perm": perm, "topicSysFlag": 0})
    return out


def snap(groups: list[Group], queues: dict[str, dict[str, int]], at: int = T0, sid: int = 1, **kw: Any) -> Snapshot:
    row = {"snapshotId": sid, "commitTime": at, **{t.version_column(x): sid for x in t.CUT_TABLES},
           "sourceOffsets": "{}"}
    return build_snapshot(row, tables(groups, queues, **kw))


def healthy() -> tuple[list[Group], dict[str, dict[str, int]]]:
    groups = [Group("a", zone="z1"), Group("b", zone="z2"), Group("c", slaves=2, zone="z1")]
    queues = {"T1": {"a": 6, "b": 6}, "T2": {"b": 6, "c": 7}, "T3": {"a": 6, "b": 6, "c": 6}, "RO": {"a": 4, "b": 4}}
    return groups, queues


def ids(rs: list[risks.Risk]) -> set[str]:
    return {r.id for r in rs}


def expired(addr: str, when: int, sid: int = 1, cluster: str = "C", name: str = "a") -> dict[str, Any]:
    return {"kind": "BROKER_EXPIRED", "time": when, "clusterName": cluster, "brokerName": name, "brokerAddr": addr,
            "snapshotId": sid}


# ---------------------------------------------------------------- each kind


def test_a_healthy_fleet_reports_nothing():
    groups, queues = healthy()
    cut = snap(groups, queues)
    assert risks.current_risks(cut) == []
    report = RiskTracker().fold(Cut(cut))
    assert len(report) == 0 and report.risks() == []
    assert report.counts() == {k.name: 0 for k in risks.KINDS}


def test_single_group_topic_appears_and_clears():
    groups, queues = healthy()
    found = risks.current_risks(snap(groups, {**queues, "Solo": {"b": 6}}))
    assert [(r.id, r.kind, r.severity, r.topic, r.broker_name) for r in found] == [
        ("single-group-topic:Solo", "single-group-topic", "warning", "Solo", "b")]
    assert "Solo" in found[0].message and found[0].since is None
    assert risks.current_risks(snap(groups, {**queues, "Solo": {"b": 6, "c": 6}})) == []


@pytest.mark.parametrize("why, group_b, perm_b, write_queues", [
    ("the other group's queues are read-only", Group("b"), 4, 8),
    ("the other group has no master", Group("b", master=False), 6, 8),
])
def test_what_counts_as_writable(why, group_b, perm_b, write_queues):
    found = risks.current_risks(snap([Group("a"), group_b], {"T": {"a": 6, "b": perm_b}, "Base": {"a": 6, "b": 6}},
                                     write_queues=write_queues))
    assert "single-group-topic:T" in ids(found), why


def test_a_groups_own_topic_is_not_single_group(tmp_path: Path):
    """Every RocketMQ broker registers a topic named after itself, on itself alone: by design."""
    queues = {"a": {"a": 7}, "b": {"a": 6, "b": 6}, "Solo": {"b": 6}, "Base": {"a": 6, "b": 6}}
    cut = snap([Group("a"), Group("b")], queues)
    expected = ["single-group-topic:Solo"]
    assert [r.id for r in risks.current_risks(cut)] == expected  # over the TopicIndex
    plain = dataclasses.replace(cut, topics={k: cut.topics[k] for k in cut.topics})
    assert [r.id for r in RiskTracker().fold(Cut(plain)).risks()] == expected
    cutfile.write_cut(cut, tmp_path / "c.cut")
    with cutfile.CutFile.open(tmp_path / "c.cut") as f:
        assert [r.id for r in RiskTracker().fold(Cut(mapped.mapped_snapshot(f))).risks()] == expected
    # a mapped file's facts name each topic's body, and several bodies share a group: b's own
    # topic has a body of its own beside Solo's (another perm), both labelled b
    queues = {"Solo": {"b": 6}, "a": {"a": 7}, "b": {"b": 7}, "Base": {"a": 6, "b": 6}}
    cut = snap([Group("a"), Group("b")], queues)
    assert [r.id for r in risks.current_risks(cut)] == expected
    cutfile.write_cut(cut, tmp_path / "d.cut")
    with cutfile.CutFile.open(tmp_path / "d.cut") as f:
        assert [r.id for r in RiskTracker().fold(Cut(mapped.mapped_snapshot(f))).risks()] == expected


def test_no_writable_queue_per_topic_is_not_single_group_and_no_write_queue_numbers_is_not_writable():
    found = risks.current_risks(snap([Group("a"), Group("b")], {"T": {"a": 4, "b": 4}, "Base": {"a": 6, "b": 6}}))
    assert ids(found) == set()
    assert ids(risks.current_risks(snap([Group("a"), Group("b")], {"T": {"a": 6, "b": 6}}, write_queues=0))) == set()


def test_single_zone_topic_appears_and_clears():
    groups = [Group("a", zone="z1"), Group("b", zone="Z1"), Group("c", zone="z2")]
    found = risks.current_risks(snap(groups, {"T": {"a": 6, "b": 6}, "U": {"a": 6, "c": 6}}))
    assert [(r.id, r.severity, r.topic) for r in found] == [("single-zone-topic:T", "info", "T")]
    assert "z1" in found[0].message  # case-insensitively one zone, named as the first group spells it
    assert risks.current_risks(snap(groups, {"T": {"a": 6, "b": 6, "c": 6}})) == []


def test_a_group_without_a_zone_is_in_no_known_zone():
    groups = [Group("a", zone="z1"), Group("b", zone=None)]
    assert risks.current_risks(snap(groups, {"T": {"a": 6, "b": 6}})) == []
    assert risks.current_risks(snap([Group("a"), Group("b")], {"T": {"a": 6, "b": 6}})) == []


@pytest.mark.parametrize("group, at_risk", [
    (Group("g", slaves=0), True),                     # a master alone
    (Group("g", slaves=2, live_slaves=0), True),      # its slaves expired
    (Group("g", slaves=2, live_slaves=1), False),     # one live slave is enough
    (Group("g", master=False, slaves=2), False),      # no master: down, not this risk
])
def test_no_live_slave(group, at_risk):
    found = risks.current_risks(snap([group, Group("h")], {"T": {"g": 6, "h": 6}}))
    lonely = [r for r in found if r.kind == "no-live-slave"]
    assert bool(lonely) == at_risk
    if at_risk:
        assert (lonely[0].id, lonely[0].cluster, lonely[0].broker_name, lonely[0].address) == \
            ("no-live-slave:g", "C", "g", "g:10911")


def test_write_perm_wiped_appears_and_clears():
    groups = [Group("a"), Group("b")]
    wiped = risks.current_risks(snap(groups, {"T": {"a": 4, "b": 6}, "U": {"a": 5, "b": 6}}))
    assert [(r.id, r.severity, r.broker_name) for r in wiped if r.kind == "write-perm-wiped"] == [
        ("write-perm-wiped:a", "critical", "a")]
    after_add = risks.current_risks(snap(groups, {"T": {"a": 6, "b": 6}, "U": {"a": 5, "b": 6}}))
    assert "write-perm-wiped:a" not in ids(after_add)


def test_flapping_counts_expiries_within_the_window_only():
    groups, queues = healthy()
    s = Settings(flap_threshold=3, window_ms=24 * HOUR)
    addr = "a-s1:10911"
    old = [expired(addr, T0 - 30 * HOUR + i) for i in range(5)]              # more than a day before
    recent = [expired(addr, T0 - 10 * HOUR + i * HOUR) for i in range(4)]     # 4 in the last day
    tracker = RiskTracker(s)
    report = tracker.fold(Cut(snap(groups, queues, T0 - 31 * HOUR, 1), old))
    assert report.counts()["flapping-broker"] == 0  # not yet: the cut came before them
    report = tracker.fold(Cut(snap(groups, queues, T0 - 29 * HOUR, 2), []))
    assert [r.id for r in report.risks()] == ["flapping-broker:C/a-s1:10911"]  # 5 within a day then
    report = tracker.fold(Cut(snap(groups, queues, T0 - 4 * HOUR, 3), recent[:3]))
    assert report.counts()["flapping-broker"] == 0  # the 5 old ones left the window; 3 is not more than 3
    report = tracker.fold(Cut(snap(groups, queues, T0, 4), recent[3:]))
    (flap,) = report.risks()
    assert (flap.id, flap.cluster, flap.broker_name, flap.address, flap.since) == \
        ("flapping-broker:C/a-s1:10911", "C", "a", addr, T0)
    assert "4 times" in flap.message
    report = tracker.fold(Cut(snap(groups, queues, T0 + 15 * HOUR, 5), []))
    assert report.counts()["flapping-broker"] == 0  # the first of the 4 left the window


def test_flapping_ignores_rows_of_later_cuts_and_other_kinds():
    groups, queues = healthy()
    rows = [expired("x:1", T0 - i, sid=9) for i in range(5)] + [
        {**expired("y:1", T0 - i), "kind": "BROKER_UNREGISTERED"} for i in range(5)]
    assert RiskTracker().fold(Cut(snap(groups, queues, T0, 2), rows)).counts()["flapping-broker"] == 0


def test_data_version_backwards_detected_and_forwards_not():
    queues = {"T": {"a": 6, "b": 6}}

    def at(k: int, **a: Any) -> Cut:
        return Cut(snap([Group("a", **a), Group("b")], queues, T0 + k * HOUR, k + 1))

    tracker = RiskTracker(Settings(window_ms=24 * HOUR))
    forwards = [at(0, counter=5), at(1, counter=6), at(2, counter=1, state_version=1),  # a greater epoch wins
                at(3, counter=1, state_version=1, timestamp=9)]
    for cut in forwards:
        assert tracker.fold(cut).counts()["data-version-backwards"] == 0
    report = tracker.fold(at(4, counter=1, state_version=1, timestamp=8))   # only the timestamp went back
    assert {r.id for r in report.risks()} == {"data-version-backwards:C/a/a:10911",
                                               "data-version-backwards:C/a/a-s1:10911"}
    r = next(r for r in report.risks() if r.address == "a:10911")
    assert (r.severity, r.cluster, r.broker_name, r.address, r.since) == ("warning", "C", "a", "a:10911", T0 + 4 * HOUR)
    assert "timestamp 9" in r.message and "timestamp 8" in r.message
    report = tracker.fold(at(10, counter=2, state_version=1))
    assert report.counts()["data-version-backwards"] == 2 and report.risks()[0].since == T0 + 4 * HOUR
    assert tracker.fold(at(29, counter=3, state_version=1)).counts()["data-version-backwards"] == 0  # a day later


def test_data_version_backwards_across_a_cut_the_broker_was_not_live_in():
    queues = {"T": {"a": 6, "b": 6}}
    tracker = RiskTracker()
    tracker.fold(Cut(snap([Group("a", counter=40), Group("b")], queues, T0, 1)))
    tracker.fold(Cut(snap([Group("b")], {"T": {"b": 6}}, T0 + 1, 2)))       # a expired
    report = tracker.fold(Cut(snap([Group("a", counter=1), Group("b")], queues, T0 + 2, 3)))  # back with an old store
    assert report.counts()["data-version-backwards"] == 2


# ---------------------------------------------------------------- ids and since


def test_ids_are_stable_and_since_is_the_start_of_the_run():
    groups, queues = healthy()
    lonely = [Group("a", slaves=0), *groups[1:]]
    with_solo = {**queues, "Solo": {"b": 6}}
    timeline = [(groups, queues), (lonely, with_solo), (lonely, with_solo), (groups, with_solo), (lonely, queues),
                (lonely, with_solo)]
    tracker = RiskTracker()
    seen = []
    for k, (gs, qs) in enumerate(timeline):
        report = tracker.fold(Cut(snap(gs, qs, T0 + k, k + 1)))
        seen.append({r.id: r.since for r in report.risks()})
    assert seen[0] == {}
    assert seen[1] == seen[2] == {"no-live-slave:a": T0 + 1, "single-group-topic:Solo": T0 + 1}
    assert seen[3] == {"single-group-topic:Solo": T0 + 1}
    assert seen[4] == {"no-live-slave:a": T0 + 4}                        # cleared at 3: a new run
    assert seen[5] == {"no-live-slave:a": T0 + 4, "single-group-topic:Solo": T0 + 5}


def test_a_cut_sharing_the_previous_topic_index_keeps_the_runs():
    groups, queues = healthy()
    queues = {**queues, "Solo": {"b": 6}}
    first = snap(groups, queues, T0, 1)
    tracker = RiskTracker()
    tracker.fold(Cut(first))
    second = build_snapshot({"snapshotId": 2, "commitTime": T0 + 5, **{t.version_column(x): 2 for x in t.CUT_TABLES},
                             "sourceOffsets": "{}"}, {**tables(groups, queues), "topic_queue": first.topics})
    report = tracker.fold(Cut(second))
    assert [(r.id, r.since) for r in report.risks()] == [("single-group-topic:Solo", T0)]


def test_cuts_fold_in_commit_order_and_need_a_time():
    groups, queues = healthy()
    tracker = RiskTracker()
    tracker.fold(Cut(snap(groups, queues, T0, 2)))
    with pytest.raises(ValueError, match="commit order"):
        tracker.fold(Cut(snap(groups, queues, T0 - 1, 3)))
    with pytest.raises(ValueError, match="commit time"):
        RiskTracker().fold(Cut(Snapshot.empty()))
    assert RiskTracker().fold(Cut(Snapshot.empty(), time_ms=5)).counts() == {k.name: 0 for k in risks.KINDS}


def test_as_of_folds_the_past_cuts():
    groups, queues = healthy()
    cuts = [Cut(snap(groups, {**queues, "Solo": {"b": 6}}, T0 + k, k + 1)) for k in range(3)]
    report = risks.report_as_of(cuts)
    assert report is not None and report.snapshot_id == 3 and report.at_ms == T0 + 2
    assert [(r.id, r.since) for r in report.risks()] == [("single-group-topic:Solo", T0)]
    assert risks.report_as_of([]) is None


# ---------------------------------------------------------------- reports


def test_pages_counts_and_json():
    groups = [Group("a", slaves=0), Group("b", slaves=0), Group("c")]
    queues = {f"T{i:02}": {"abc"[i % 3]: 6 if i % 4 else 4} for i in range(30)} | {"Base": {"a": 4, "b": 6, "c": 6}}
    report = RiskTracker().fold(Cut(snap(groups, queues)))
    every = report.risks()
    assert [r.kind for r in every] == sorted((r.kind for r in every), key=[k.name for k in risks.KINDS].index)
    assert len(every) == len(report) == sum(report.counts().values())
    assert report.counts() == risks.counts_by_kind(every)
    for offset, limit in ((0, 1), (3, 5), (20, 100), (len(every), 3), (0, 0)):
        assert report.risks(offset=offset, limit=limit) == every[offset:offset + limit]
    assert report.risks(kind="no-live-slave") == [r for r in every if r.kind == "no-live-slave"]
    body = every[0].to_json()
    assert set(body) <= {"id", "kind", "severity", "message", "since", "topic", "cluster", "brokerName", "address"}
    assert body["id"] == every[0].id and body["since"] == T0


def test_every_kind_is_described():
    assert len({k.name for k in risks.KINDS}) == 6
    for k in risks.KINDS:
        assert k.severity in (risks.CRITICAL, risks.WARNING, risks.INFO) and k.description
        assert f"`{k.name}` ({k.severity})" in (risks.__doc__ or "")


def test_the_three_readings_of_a_cuts_topics_agree(tmp_path: Path):
    """A TopicIndex (numpy), a mapped cut file (once per body) and any other mapping (per topic)."""
    groups = [Group(f"g{i}", slaves=i % 2, master=i % 5 != 4, zone=[None, "z1", "Z1", "z2"][i % 4]) for i in range(12)]
    queues: dict[str, dict[str, int]] = {}
    for i in range(60):
        hosts = [f"g{(i * 7 + j) % 12}" for j in range(1 + i % 3)]
        queues[f"T-{i}"] = {h: [6, 4, 7, 2][(i + j) % 4] for j, h in enumerate(hosts)}
    queues["OnAGhost"] = {"ghost": 6}
    queues["主题-ü"] = {"g1": 6}
    queues["Wiped"] = {"g3": 4}
    cut = snap(groups, queues)
    by_arrow = RiskTracker().fold(Cut(cut)).risks()
    assert {r.kind for r in by_arrow} >= {"single-group-topic", "single-zone-topic", "no-live-slave"}
    plain = dataclasses.replace(cut, topics={k: cut.topics[k] for k in cut.topics})
    assert RiskTracker().fold(Cut(plain)).risks() == by_arrow
    cutfile.write_cut(cut, tmp_path / "c.cut")
    with cutfile.CutFile.open(tmp_path / "c.cut") as f:
        assert RiskTracker().fold(Cut(mapped.mapped_snapshot(f))).risks() == by_arrow
    columns = dataclasses.replace(cut, topics=risks.TopicColumns(1, lambda: queue_table(queues)))
    assert RiskTracker().fold(Cut(columns)).risks() == by_arrow


def queue_table(queues: dict[str, dict[str, int]]) -> pa.Table:
    """RISK_QUEUE_COLUMNS of `queues`, in no particular order (the history reads them so)."""
    rows = [(topic, name, perm) for topic, perms in reversed(queues.items()) for name, perm in perms.items()]
    return pa.table({"topic": [r[0] for r in rows], "brokerName": [r[1] for r in rows],
                     "perm": pa.array([r[2] for r in rows], pa.int32()), "writeQueueNums": pa.array([8] * len(rows), pa.int32())})


def test_topic_columns_are_read_only_while_facts_are_made():
    """The history's cuts hand the tracker TopicColumns: read when the tracker computes topic facts,
    dropped after, not read again for a cut of the same rows and BrokerDatas, read again when the
    BrokerDatas moved under the same rows; they hold no QueueDatas."""
    groups, queues = healthy()
    queues = {**queues, "Solo": {"b": 6}}
    reads: list[int] = []

    def read() -> pa.Table:
        reads.append(1)
        return queue_table(queues)

    def cut(sid: int, groups: list[Group]) -> Snapshot:
        return dataclasses.replace(snap(groups, queues, T0 + sid, sid), topics=topics)

    topics = risks.TopicColumns(7, read)
    tracker = RiskTracker()
    first = tracker.fold(Cut(cut(1, groups)))
    assert len(reads) == 1 and topics.loaded
    topics.release()
    assert not topics.loaded
    tracker.fold(Cut(cut(2, groups)))
    assert len(reads) == 1 and not topics.loaded  # the same rows and BrokerDatas: the facts are kept
    wiped = [dataclasses.replace(g, master=g.name != "b") for g in groups]  # b lost its master
    report = tracker.fold(Cut(cut(3, wiped)))
    assert len(reads) == 2
    assert [r.id for r in first.risks(kind="single-group-topic")] == ["single-group-topic:Solo"]
    assert report.risks(kind="single-group-topic") != first.risks(kind="single-group-topic")
    with pytest.raises(TypeError):
        _ = "Solo" in topics


# ---------------------------------------------------------------- the tracker against a recomputation


GROUPS = ("a", "b", "c")
group_st = st.builds(Group, name=st.just("?"), master=st.sampled_from([True, True, False]), slaves=st.integers(0, 2),
                     live_slaves=st.integers(0, 2), zone=st.sampled_from([None, "z1", "Z1", "z1", "z2"]),
                     counter=st.integers(0, 3), state_version=st.integers(0, 1))
cut_st = st.fixed_dictionaries({
    "groups": st.lists(st.tuples(st.sampled_from(GROUPS), group_st), min_size=1, max_size=3),
    "queues": st.dictionaries(st.sampled_from(["T1", "T2", "T3"]),
                              st.dictionaries(st.sampled_from(GROUPS), st.sampled_from([2, 4, 6, 6]), min_size=1, max_size=3),
                              max_size=3),
    "step": st.integers(0, 60),
    "expiries": st.lists(st.tuples(st.sampled_from(["x:1", "y:1"]), st.integers(0, 80)), max_size=3),
    "repeat_topology": st.booleans(),
})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(cut_st, min_size=1, max_size=7))
def test_the_tracker_agrees_with_a_recomputation_at_every_cut(steps):
    s = Settings(flap_threshold=1, window_ms=50)
    tracker = RiskTracker(s)
    cuts: list[Cut] = []
    at = T0
    previous: tuple[Snapshot, list[Group], dict[str, dict[str, int]]] | None = None
    for k, step in enumerate(steps):
        at += step["step"]
        groups = [dataclasses.replace(g, name=n) for n, g in {n: g for n, g in step["groups"]}.items()]
        queues = step["queues"]
        changes = [expired(a, at - ago, sid=k + 1) for a, ago in step["expiries"]]
        if step["repeat_topology"] and previous is not None:
            prev_snap, prev_groups, prev_queues = previous  # the same queue rows and BrokerDatas: the same index
            groups = [dataclasses.replace(g, counter=(g.counter + step["step"]) % 4) for g in prev_groups]
            row = {"snapshotId": k + 1, "commitTime": at, **{t.version_column(x): k + 1 for x in t.CUT_TABLES},
                   "sourceOffsets": "{}"}
            cut_snap = build_snapshot(row, {**tables(groups, prev_queues), "topic_queue": prev_snap.topics})
            queues = prev_queues
        else:
            cut_snap = snap(groups, queues, at, k + 1)
        previous = (cut_snap, groups, queues)
        cuts.append(Cut(cut_snap, changes))
        folded = [(r.id, r.since, r.message) for r in tracker.fold(cuts[-1]).risks()]
        again = [(r.id, r.since, r.message) for r in risks.report_from_scratch(cuts, s)]
        assert folded == again


def test_a_tracker_over_mapped_cuts_decodes_only_the_bodies_whose_inputs_changed(tmp_path: Path):
    """One tracker folding mapped cut files keeps each body's facts by the writer's kind key: a
    cut decodes only the bodies of changed kinds, and reports what a fresh reading of each cut
    reports, also where only a BrokerData moved under the same queue rows (a master gone, a zone
    renamed)."""
    groups = [Group(f"g{i}", zone=["z1", "z2"][i % 2]) for i in range(8)]
    queues = {f"T-{i}": {f"g{i % 8}": 6, f"g{(i + 1) % 8}": 6 if i % 3 else 4} for i in range(24)}
    queues.update({f"Own-{i}": {f"g{i}": 6} for i in range(8)})
    steps = [("first", groups, queues),
             ("a new topic", groups, {**queues, "New": {"g1": 6, "g5": 6}}),
             ("a perm changed", groups, {**queues, "New": {"g1": 6, "g5": 6}, "T-3": {"g3": 7, "g4": 6}}),
             ("a master gone", [dataclasses.replace(g, master=g.name != "g3") for g in groups],
              {**queues, "New": {"g1": 6, "g5": 6}, "T-3": {"g3": 7, "g4": 6}}),
             ("zones renamed", [dataclasses.replace(g, master=g.name != "g3", zone="Z9" if g.name in ("g2", "g3") else g.zone)
                                for g in groups], {**queues, "New": {"g1": 6, "g5": 6}, "T-3": {"g3": 7, "g4": 6}})]
    tracker = RiskTracker()
    decoded: list[int] = []
    previous: cutfile.CutFile | None = None
    for n, (what, gs, qs) in enumerate(steps, start=1):
        cut = snap(gs, qs, T0 + n, n)
        path = tmp_path / f"{n}.cut"
        cutfile.write_cut(cut, path, previous)
        f = cutfile.CutFile.open(path)
        calls = [0]
        body = f.body

        def counted(b: int, body: Any = body, calls: list[int] = calls) -> Any:
            calls[0] += 1
            return body(b)
        f.body = counted  # type: ignore[method-assign]
        got = tracker.fold(Cut(mapped.mapped_snapshot(f))).risks()
        fresh = RiskTracker().fold(Cut(cut)).risks()
        assert [(r.id, r.message) for r in got] == [(r.id, r.message) for r in fresh], what
        decoded.append(calls[0])
        if previous is not None:
            previous.close()
        previous = f
    assert previous is not None
    previous.close()
    assert decoded[0] == previous.body_count or decoded[0] > 10
    assert decoded[1] == 1 and decoded[2] == 1, decoded  # the new topic's body, then the changed one's
    assert 0 < decoded[3] < decoded[0] and 0 < decoded[4] < decoded[0], decoded  # g3's and g2/g3's bodies
