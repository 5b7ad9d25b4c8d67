"""Buckets of broker groups (pipelines.buckets): many groups per operator key, the rules unchanged.

The oracle is the layout they replaced: one key per group, called when it has records or when
its own deadline is due, which is how Spark's per-key timeouts called it.
"""

from __future__ import annotations

import random

import pytest

from pipelines import buckets as bk
from pipelines.step import GroupRunner, StepConfig, run_group
from pipelines.step_rows import DEADLINE
from routeinfo.state import GroupState, topic_keys_digest
from schemas import events as ev
from tests.helpers import CLUSTER, hb, reg, routing_config, topics, unreg

CFG = StepConfig(routing_config(default_timeout_ms=10_000), max_message_bytes=1 << 20,
                 max_clock_skew_ms=600_000)
T0 = 1_700_000_000_000


def record(event, offset, ts):
    return {"partition": 0, "offset": offset, "timestamp": ts, "key": event["brokerName"], "value": ev.encode(event)[1]}


NO_FLUSH_WINDOW = StepConfig(routing_config(default_timeout_ms=10_000, live_flush_ms=0), max_message_bytes=1 << 20,
                             max_clock_skew_ms=600_000)


class run(GroupRunner):
    """The rules at `now`; `ran` lists the groups whose route rules ran (not absorbed by the live table)."""

    def __init__(self, now, cfg=CFG, ran=None, fetch=None):
        super().__init__(now, cfg, fetch=fetch)
        self.ran = ran if ran is not None else []

    def run(self, group, records, state):
        self.ran.append(group)
        return super().run(group, records, state)


def test_a_bucket_state_round_trips_its_groups_whole():
    entries = {name: bk.Entry(core, topics_json, deadline) for (name, core, topics_json), deadline in zip(
        _states(reg("a%b|c", 0, "10.0.0.1:1", tps=topics("T", "U")), reg("plain", 0, "10.0.0.2:1")), (5, None), strict=True)}
    back = bk.groups(bk.encode_groups(entries))
    assert {g: (e.core, e.topics, e.deadline) for g, e in back.items()} == {
        g: (e.core, e.topics, e.deadline) for g, e in entries.items()}
    assert bk.encode_groups({}) is None and bk.groups(None) == {}


def test_only_groups_with_records_or_due_deadlines_run():
    ran: list[str] = []

    def spy(now):
        return run(now, NO_FLUSH_WINDOW, ran)

    state, deadline, _ = bk.run_bucket([record(reg("a", 0, "10.0.0.1:1"), 0, T0),
                                        record(reg("b", 0, "10.0.0.2:1"), 1, T0 + 5_000)], None, T0 + 5_000,
                                       spy(T0 + 5_000))
    assert ran == ["a", "b"] and deadline == T0 + 10_001  # a's deadline, the earlier
    ran.clear()
    state, deadline, rows = bk.run_bucket([], state, T0 + 10_001, spy(T0 + 10_001))
    assert ran == ["a"]  # b is not due, and is not decoded
    assert set(bk.groups(state)) == {"b"} and deadline == T0 + 15_001
    assert any(r["target"] == DEADLINE and r["owner"] == "a" and r["body"] == "" for r in rows)
    _, deadline, _ = bk.run_bucket([], state, T0 + 15_001, spy(T0 + 15_001))
    assert deadline is None


@pytest.mark.parametrize("seed", range(20))
def test_a_bucket_emits_what_one_key_per_group_emits(seed):
    """The oracle is each group alone through its route rules; the bucket absorbs what it can in
    its live table (heartbeats, small repeats of a fixed point) and must emit the same rows."""
    rng = random.Random(seed)
    groups = [f"broker-{i}" for i in range(6)]
    now = T0
    log: list[bytes] = []
    registered: dict[tuple[str, str], list[tuple[dict, int]]] = {}  # an address's registrations and offsets

    def fetch(partition, offsets):
        return [log[o] if o < len(log) else None for o in offsets]

    def repeat(g, addr):
        older = registered.get((g, addr))
        if not older:
            return hb(g, 0, addr)
        event, at = older[-1] if rng.random() < 0.85 else rng.choice(older)
        return ev.repeated_registration_event(event, [at], topic_keys_digest(event["topicConfigTable"]))

    bucket_state = None
    per_group: dict[str, tuple[tuple[str, str | None], int | None]] = {}
    absorbed = 0
    for _ in range(30):
        now += rng.choice([1_000, 3_000, 7_000, 12_000])
        records = []
        for _ in range(rng.randrange(0, 6)):
            g = rng.choice(groups)
            addr = f"10.0.0.{groups.index(g)}:{rng.choice([1, 2])}"
            bid = 0 if addr.endswith(":1") else 1
            event = rng.choice([reg(g, bid, addr, tps=topics(*rng.sample(["T1", "T2", "T3"], 2)),
                                    counter=rng.randrange(3)),
                                hb(g, bid, addr), hb(g, bid, addr), repeat(g, addr), repeat(g, addr),
                                unreg(g, bid, addr)])
            if event["type"] == ev.REGISTER_BROKER and "repeats" not in event:
                registered.setdefault((g, addr), []).append((event, len(log)))
            records.append(record(event, len(log), now - rng.randrange(500)))
            log.append(records[-1]["value"])
        rules = run(now, fetch=fetch)
        bucket_state, bucket_deadline, bucket_rows = bk.run_bucket(records, bucket_state, now, rules)
        expected_rows = []
        by_group = {g: [r for r in records if r["key"] == g] for g in groups}
        for g in groups:
            previous = per_group.get(g)
            due = previous is not None and previous[1] is not None and previous[1] <= now
            if by_group[g] or due:
                absorbed += g not in rules.ran
                new, deadline, rows = run_group(g, by_group[g], previous[0] if previous else None, now, CFG,
                                                fetch=fetch)
                expected_rows += rows
                if new is None:
                    per_group.pop(g, None)
                else:
                    per_group[g] = (new, deadline)
        assert bucket_rows == expected_rows
        assert {g: (e.core, e.topics) for g, e in bk.groups(bucket_state).items()} == {
            g: (s[0], s[1] or "{}") for g, (s, _) in per_group.items()}
        assert bucket_deadline == min((d for _, d in per_group.values() if d is not None), default=None)
    assert absorbed  # the live table took some calls: the comparison above held it to the rules


def test_a_steady_fleet_is_absorbed_and_a_change_runs_the_rules():
    """Re-registrations repeated small every 3 s and heartbeats: no group's route state is decoded;
    a repeat naming another registration, or a changed one, runs the rules."""
    ran: list[str] = []
    log: list[bytes] = []

    def append(event, at):
        log.append(ev.encode(event)[1])
        return record(event, len(log) - 1, at)

    first = {g: reg(g, 0, f"10.0.0.{i}:1", tps=topics("T1", "T2")) for i, g in enumerate(("a", "b", "c"))}
    offsets = {}
    records = []
    for g, event in first.items():
        records.append(append(event, T0))
        offsets[g] = records[-1]["offset"]
    state, _, _ = bk.run_bucket(records, None, T0, run(T0, ran=ran))
    assert sorted(ran) == ["a", "b", "c"]
    fetch = lambda p, offs: [log[o] for o in offs]  # noqa: E731
    for n in range(1, 4):
        ran.clear()
        now = T0 + 3_000 * n
        small = [append(ev.repeated_registration_event(first[g], [offsets[g]],
                                                       topic_keys_digest(first[g]["topicConfigTable"])), now)
                 for g in ("a", "b")] + [append(hb("c", 0, "10.0.0.2:1"), now)]
        state, deadline, rows = bk.run_bucket(small, state, now, run(now, ran=ran, fetch=fetch))
        assert ran == [] and deadline == now + 10_001
        assert [r["owner"] for r in rows if r["target"] == DEADLINE] == ["a", "b", "c"]
    lives = {g: GroupState.from_parts(e.core, e.topics).live for g, e in bk.groups(state).items()}
    assert lives["a"][(CLUSTER, "10.0.0.0:1")].last_update == T0 + 9_000
    assert lives["c"][(CLUSTER, "10.0.0.2:1")].last_update == T0 + 9_000
    ran.clear()
    changed = reg("a", 0, "10.0.0.0:1", tps=topics("T1", "T2"), counter=2)
    stale = ev.repeated_registration_event(first["b"], [offsets["b"] + 100], topic_keys_digest(
        first["b"]["topicConfigTable"]))
    bk.run_bucket([append(changed, T0 + 12_000), append(stale, T0 + 12_000)], state, T0 + 12_000,
                  run(T0 + 12_000, ran=ran, fetch=lambda p, offs: [log[o] if o < len(log) else None for o in offs]))
    assert sorted(ran) == ["a", "b"]


def _states(*events, now=T0):
    """(brokerName, core, topics) of each event's group after registering it alone."""
    out = []
    for i, e in enumerate(events):
        state, _, _ = run_group(e["brokerName"], [record(e, i, now)], None, now, CFG)
        out.append((e["brokerName"], state[0], state[1]))
    return out


@pytest.mark.parametrize("recorded", [None, bk.Layout(3), bk.Layout(3, 2), bk.Layout(2)])
def test_a_checkpoint_of_any_layout_is_regrouped_into_the_new_buckets(recorded):
    from pipelines.state_layout import import_rows
    groups = _states(*(reg(f"g{i}", 0, f"10.0.0.{i}:1", tps=topics("T", f"U{i}")) for i in range(7)))
    if recorded is None:
        rows = [*groups, ("kv/ns", '{"kv":1}', None)]  # one key per group, and a KV namespace
    else:
        entries = {g: bk.Entry(core, topics_json, None) for g, core, topics_json in groups}
        n = recorded.buckets
        rows = [(key, *bk.encode_groups({g: e for g, e in entries.items() if int(g[1:]) % n == i}))
                for i, key in enumerate(recorded.keys)] + [("kv/ns", '{"kv":1}', None)]
    layout = bk.Layout(2, 2)
    moved, count = import_rows(rows, recorded, lambda names: {n: layout.keys[int(n[1:]) % 2] for n in names}, layout,
                               CFG.routing)
    assert count == 7 and [r["key"] for r in moved] == sorted(layout.keys)
    back = {g: e for r in moved for g, e in bk.groups((r["core"], r["topics"])).items()}
    assert {g: (e.core, e.topics) for g, e in back.items()} == {g: (c, tj) for g, c, tj in groups}
    assert {e.deadline for e in back.values()} == {T0 + 10_001}  # recomputed from each group's liveness
    first = next(r for r in moved if r["key"] == layout.keys[0])
    assert set(bk.groups((first["core"], first["topics"]))) == {"g0", "g2", "g4", "g6"}


def test_a_bucket_state_of_the_layout_before_the_live_table_is_read_and_rewritten():
    """A checkpoint written before the live table (each group's core held its live entries) runs on:
    its groups are the same, and the first call writes the new layout."""
    groups = _states(reg("a", 0, "10.0.0.1:1"), reg("b", 0, "10.0.0.2:1"))
    old = ("\n".join(f'"{g}"\t{T0 + 10_001}\t{core}' for g, core, _ in groups),
           "\n".join(f'"{g}"\t{tps}' for g, _, tps in groups))
    assert {g: (e.core, e.topics) for g, e in bk.groups(old).items()} == {g: (c, tps) for g, c, tps in groups}
    ran: list[str] = []
    state, deadline, rows = bk.run_bucket([record(hb("a", 0, "10.0.0.1:1"), 2, T0 + 1_000)], old, T0 + 1_000,
                                          run(T0 + 1_000, ran=ran))
    expected = run_group("a", [record(hb("a", 0, "10.0.0.1:1"), 2, T0 + 1_000)], (groups[0][1], groups[0][2]),
                         T0 + 1_000, CFG)
    assert ran == [] and state[0].startswith(bk.LIVE_LINE) and rows == expected[2]
    assert bk.groups(state)["a"].core == expected[0][0] and deadline == T0 + 10_001


def test_what_the_live_table_may_not_vouch_for_runs_the_rules():
    """A repeat naming its registration with other topic names, a job under other settings, and the
    repeat read whole after its broker was unregistered (it then counts as the registration it
    names, as the front's later repeats and its connection's unregistration do)."""
    log: list[bytes] = []

    def append(event, at):
        log.append(ev.encode(event)[1])
        return record(event, len(log) - 1, at)

    def fetch(partition, offsets):
        return [log[o] if o < len(log) else None for o in offsets]

    first = reg("a", 0, "10.0.0.1:1", tps=topics("T1", "T2"))
    keys = topic_keys_digest(first["topicConfigTable"])
    state, _, _ = bk.run_bucket([append(first, T0)], None, T0, run(T0, fetch=fetch))

    def step(event, at, cfg=CFG):
        ran: list[str] = []
        nonlocal state
        previous = {g: (e.core, e.topics) for g, e in bk.groups(state).items()}.get("a")
        rec = append(event, at)
        state, _, rows = bk.run_bucket([rec], state, at, run(at, cfg, ran=ran, fetch=fetch))
        assert rows == run_group("a", [rec], previous, at, cfg, fetch=fetch)[2]
        return ran

    assert step(ev.repeated_registration_event(first, [0], keys), T0 + 1_000) == []
    other_names = ev.repeated_registration_event(first, [0], topic_keys_digest(["T1", "T3"]))
    assert step(other_names, T0 + 2_000) == ["a"]  # the rules read the body, and refuse the repeat
    longer = StepConfig(routing_config(default_timeout_ms=20_000), max_message_bytes=1 << 20,
                        max_clock_skew_ms=600_000)
    assert step(ev.repeated_registration_event(first, [0], keys), T0 + 3_000, longer) == ["a"]
    assert step(ev.repeated_registration_event(first, [0], keys), T0 + 4_000, longer) == []
    assert step(unreg("a", 0, "10.0.0.1:1"), T0 + 5_000, longer) == ["a"] and bk.groups(state) == {}
    assert step(ev.repeated_registration_event(first, [0], keys), T0 + 6_000, longer) == ["a"]  # read whole
    assert step(ev.repeated_registration_event(first, [0], keys), T0 + 7_000, longer) == []
