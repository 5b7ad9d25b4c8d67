"""A bucket's live table (liveness/hot.py) on its own: what it absorbs, what it leaves to the rules.

The random oracles (tests/pipeline/test_buckets.py, tests/expiry/test_liveness_oracle.py and the
model property test) hold its outcomes to the route rules; these cases name each refusal.
"""

from __future__ import annotations

from liveness import hot

T0 = 1_700_000_000_000
DIGEST = "d" * 24


def row(addr: str, *, last: int = T0, fixed: bool = True, registered: int = 7, stale: int = -1,
        materialized: int | None = None) -> hot.Row:
    return hot.Row("C", addr, hot.statics(0, {"counter": 1, "stateVersion": 0, "timestamp": 1}, None), DIGEST,
                   last, last if materialized is None else materialized, stale, 120_000, registered, fixed)


def table() -> hot.LiveTable:
    return hot.LiveTable.empty().with_groups({"a": [row("10.0.0.1:1")], "b": [row("10.0.0.2:1"), row("10.0.0.3:1")]})


def repeat(addr: str, at: int, *, registration: int = 7, digest: str = DIGEST) -> hot.Signal:
    return hot.Signal("C", addr, at, registration, digest)


def test_the_table_round_trips_and_keeps_its_groups_sorted():
    t = hot.LiveTable.decode(table().encode())
    assert [(r.addr, r.last, r.fixed) for r in t.rows("b")] == [("10.0.0.2:1", T0, True), ("10.0.0.3:1", T0, True)]
    assert t.rows("missing") == [] and len(t.with_groups({"a": []})) == 2


def test_pure_signals_move_times_and_the_first_marks_when_broker_live_went_stale():
    t = table()
    out = t.absorb({"a": hot.Call([repeat("10.0.0.1:1", T0 + 3_000), hot.Signal("C", "10.0.0.1:1", T0 + 2_000)],
                                  T0 + 3_000),
                    "b": hot.Call([hot.Signal("C", "10.0.0.9:1", T0 + 3_000)], T0 + 3_000)}, T0 + 3_000,
                   flush_ms=30_000, heard_since=None)
    assert set(out) == {"a", "b"}
    [a] = t.rows("a")
    assert (a.last, a.materialized, a.stale_since) == (T0 + 3_000, T0, T0 + 3_000)
    assert out["a"].flushed is None and out["a"].deadline == min(T0 + 3_000 + 120_001, (T0 + 3_000) // 30_000 * 30_000 + 30_000)
    assert [r.last for r in t.rows("b")] == [T0, T0]  # a heartbeat of an address the group has not: nothing
    assert out["b"].deadline == T0 + 120_001


def test_a_flush_writes_the_whole_group_once_its_window_ended():
    t = table()
    t.absorb({"a": hot.Call([hot.Signal("C", "10.0.0.1:1", T0 + 1_000)], T0 + 1_000)}, T0 + 1_000, 30_000, None)
    later = (T0 // 30_000 + 2) * 30_000
    out = t.absorb({"a": hot.Call([], later)}, later, 30_000, None)
    assert out["a"].flushed is not None and [(r.materialized, r.stale_since) for r in out["a"].flushed] == [
        (T0 + 1_000, -1)]


def test_what_the_rules_must_decide_is_left_to_them():
    def absorbed(signal: hot.Signal, *, rows: list[hot.Row] | None = None, at: int = T0 + 1_000) -> bool:
        t = hot.LiveTable.empty().with_groups({"a": rows or [row("10.0.0.1:1")]})
        return "a" in t.absorb({"a": hot.Call([signal], at)}, at, 0, None)

    assert absorbed(repeat("10.0.0.1:1", T0 + 1_000))
    assert not absorbed(repeat("10.0.0.1:1", T0 + 1_000, registration=6))  # names another registration
    assert not absorbed(repeat("10.0.0.1:1", T0 + 1_000, digest="e" * 24))  # another header
    assert not absorbed(repeat("10.0.0.1:1", T0 + 1_000), rows=[row("10.0.0.1:1", fixed=False)])  # not a fixed point
    assert not absorbed(repeat("10.0.0.2:1", T0 + 1_000))  # an address the group has not
    # a row silent past its timeout by the signal's time: the rules expire it first
    assert not absorbed(hot.Signal("C", "10.0.0.1:1", T0 + 120_001), at=T0 + 120_001)
    assert absorbed(hot.Signal("C", "10.0.0.1:1", T0 + 120_000), at=T0 + 120_000)
    # judged from the log's outage floor, as housekeeping judges
    t = hot.LiveTable.empty().with_groups({"a": [row("10.0.0.1:1")]})
    assert "a" in t.absorb({"a": hot.Call([], T0 + 150_000)}, T0 + 150_000, 0, heard_since=T0 + 60_000)
