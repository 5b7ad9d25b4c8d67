"""Buckets of broker groups (pipelines.buckets): many groups per operator key, the rules unchanged.

The oracle is the layout they replaced: one key per group, called when it has records or when
its own deadline is due, which is how Spark's per-key timeouts called it.
"""

from __future__ import annotations

import random

import pytest

from pipelines import buckets as bk
from pipelines.step import StepConfig, run_group
from pipelines.step_rows import DEADLINE
from schemas import events as ev
from tests.helpers import hb, reg, routing_config, topics, unreg

CFG = StepConfig(routing_config(default_timeout_ms=10_000), max_message_bytes=1 << 20,
                 max_clock_skew_ms=600_000)
T0 = 1_700_000_000_000


def record(event, offset, ts):
    return {"partition": 0, "offset": offset, "timestamp": ts, "key": event["brokerName"], "value": ev.encode(event)[1]}


NO_FLUSH_WINDOW = StepConfig(routing_config(default_timeout_ms=10_000, live_flush_ms=0), max_message_bytes=1 << 20,
                             max_clock_skew_ms=600_000)


def run(now, cfg=CFG):
    return lambda group, records, state: run_group(group, records, state, now, cfg)


def test_state_lines_round_trip_names_that_need_escaping():
    entries = {'a\tb"\n': bk.Entry('{"x":1}', '{"T":{}}', 5), "plain": bk.Entry("{}", "{}", None)}
    assert bk.decode(bk.encode(entries)) == entries
    assert bk.encode({}) is None and bk.decode(None) == {}


def test_only_groups_with_records_or_due_deadlines_run():
    ran: list[str] = []

    def spy(now):
        def call(group, records, state):
            ran.append(group)
            return run(now, NO_FLUSH_WINDOW)(group, records, state)
        return call

    state, deadline, _ = bk.run_bucket([record(reg("a", 0, "10.0.0.1:1"), 0, T0),
                                        record(reg("b", 0, "10.0.0.2:1"), 1, T0 + 5_000)], None, T0 + 5_000,
                                       spy(T0 + 5_000))
    assert ran == ["a", "b"] and deadline == T0 + 10_001  # a's deadline, the earlier
    ran.clear()
    state, deadline, rows = bk.run_bucket([], state, T0 + 10_001, spy(T0 + 10_001))
    assert ran == ["a"]  # b is not due, and is not decoded
    assert set(bk.decode(state)) == {"b"} and deadline == T0 + 15_001
    assert any(r["target"] == DEADLINE and r["owner"] == "a" and r["body"] == "" for r in rows)
    _, deadline, _ = bk.run_bucket([], state, T0 + 15_001, spy(T0 + 15_001))
    assert deadline is None


@pytest.mark.parametrize("seed", range(20))
def test_a_bucket_emits_what_one_key_per_group_emits(seed):
    rng = random.Random(seed)
    groups = [f"broker-{i}" for i in range(6)]
    now, offset = T0, 0
    bucket_state = None
    per_group: dict[str, tuple[tuple[str, str | None], int | None]] = {}
    for _ in range(30):
        now += rng.choice([1_000, 3_000, 7_000, 12_000])
        records = []
        for _ in range(rng.randrange(0, 6)):
            g = rng.choice(groups)
            addr = f"10.0.0.{groups.index(g)}:{rng.choice([1, 2])}"
            bid = 0 if addr.endswith(":1") else 1
            event = rng.choice([reg(g, bid, addr, tps=topics(*rng.sample(["T1", "T2", "T3"], 2)),
                                    counter=rng.randrange(3)),
                                hb(g, bid, addr), hb(g, bid, addr), unreg(g, bid, addr)])
            records.append(record(event, offset, now - rng.randrange(500)))
            offset += 1
        bucket_state, bucket_deadline, bucket_rows = bk.run_bucket(records, bucket_state, now, run(now))
        expected_rows = []
        by_group = {g: [r for r in records if r["key"] == g] for g in groups}
        for g in groups:
            previous = per_group.get(g)
            due = previous is not None and previous[1] is not None and previous[1] <= now
            if by_group[g] or due:
                new, deadline, rows = run_group(g, by_group[g], previous[0] if previous else None, now, CFG)
                expected_rows += rows
                if new is None:
                    per_group.pop(g, None)
                else:
                    per_group[g] = (new, deadline)
        assert bucket_rows == expected_rows
        assert {g: (e.core, e.topics) for g, e in bk.decode(bucket_state).items()} == {
            g: (s[0], s[1] or "{}") for g, (s, _) in per_group.items()}
        assert bucket_deadline == min((d for _, d in per_group.values() if d is not None), default=None)


def _states(*events, now=T0):
    """(brokerName, core, topics) of each event's group after registering it alone."""
    out = []
    for i, e in enumerate(events):
        state, _, _ = run_group(e["brokerName"], [record(e, i, now)], None, now, CFG)
        out.append((e["brokerName"], state[0], state[1]))
    return out


@pytest.mark.parametrize("recorded", [None, 3])
def test_a_checkpoint_of_any_layout_is_regrouped_into_the_new_buckets(recorded):
    from pipelines.state_layout import import_rows
    groups = _states(*(reg(f"g{i}", 0, f"10.0.0.{i}:1", tps=topics("T", f"U{i}")) for i in range(7)))
    if recorded is None:
        rows = [*groups, ("kv/ns", '{"kv":1}', None)]  # one key per group, and a KV namespace
    else:
        entries = {g: bk.Entry(core, topics_json, None) for g, core, topics_json in groups}
        rows = [(f"{bk.bucket_prefix(3)}{n}", *bk.encode({g: e for g, e in entries.items() if int(g[1:]) % 3 == n}))
                for n in range(3)] + [("kv/ns", '{"kv":1}', None)]
    moved, count = import_rows(rows, recorded, lambda names: {n: int(n[1:]) % 2 for n in names}, 2, CFG.routing)
    assert count == 7 and [r["key"] for r in moved] == ["b2/0", "b2/1"]
    back = {g: e for r in moved for g, e in bk.decode((r["core"], r["topics"])).items()}
    assert {g: (e.core, e.topics) for g, e in back.items()} == {g: (c, tj) for g, c, tj in groups}
    assert {e.deadline for e in back.values()} == {T0 + 10_001}  # recomputed from each group's liveness
    assert set(bk.decode((moved[0]["core"], moved[0]["topics"]))) == {"g0", "g2", "g4", "g6"}
