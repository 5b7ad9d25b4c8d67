"""liveness.admission: when a trigger runs a micro-batch, and what offsets it returns (pure)."""

from __future__ import annotations

import pytest

from liveness.admission import IDLE_BATCH_MS, TICK, Backlog, decide, next_look_ms, offsets_to_run, pending_ranges

DEFER = 10_000
NOW = 1_000_000


def never_asked() -> Backlog:
    raise AssertionError("the waiting records should not have been scanned")


def run(*, last_run=NOW - 1, pending=True, backlog=never_asked, deadline=None, defer=DEFER, now=NOW,
        pace=0) -> bool:
    return decide(now, defer_ms=defer, last_run_ms=last_run, pending=pending, backlog=backlog,
                  next_deadline=lambda: deadline, pace_ms=pace)


def test_every_trigger_runs_when_nothing_may_wait():
    assert run(defer=0)


def test_waiting_records_run_when_defer_ms_passed_without_a_batch():
    assert run(last_run=NOW - DEFER, pending=True)
    assert not run(last_run=NOW - DEFER + 1, pending=True, backlog=lambda: Backlog(False, NOW - 1))


def test_with_nothing_to_read_a_batch_runs_only_as_a_rare_safety_net():
    # a micro-batch costs about a second of CPU however empty: not every deferral window
    assert not run(last_run=NOW - DEFER, pending=False)
    assert not run(last_run=NOW - IDLE_BATCH_MS + 1, pending=False)
    assert run(last_run=NOW - IDLE_BATCH_MS, pending=False)


def test_a_waiting_record_other_than_a_heartbeat_runs_at_once():
    assert run(backlog=lambda: Backlog(urgent=True, oldest_heartbeat_ms=None))


def test_heartbeats_wait_up_to_defer_ms():
    young = lambda: Backlog(urgent=False, oldest_heartbeat_ms=NOW - DEFER + 1)  # noqa: E731
    old = lambda: Backlog(urgent=False, oldest_heartbeat_ms=NOW - DEFER)  # noqa: E731
    assert not run(backlog=young)
    assert run(backlog=old)


def test_a_full_batch_of_heartbeats_runs_without_waiting_longer():
    young = lambda: Backlog(urgent=False, oldest_heartbeat_ms=NOW - 1)  # noqa: E731
    assert decide(NOW, defer_ms=DEFER, last_run_ms=NOW - 1, pending=True, backlog=never_asked,
                  next_deadline=lambda: None, waiting_records=5000, full_batch=5000)
    assert not decide(NOW, defer_ms=DEFER, last_run_ms=NOW - 1, pending=True, backlog=young,
                      next_deadline=lambda: None, waiting_records=4999, full_batch=5000)


@pytest.mark.parametrize("deadline, expected", [(NOW, True), (NOW - 5, True), (NOW + 1, False), (None, False)])
def test_a_due_group_timeout_runs_a_batch_without_records(deadline, expected):
    assert run(pending=False, deadline=deadline) is expected


PACE = 500


def test_a_change_runs_right_after_the_previous_batch_whatever_the_pace():
    urgent = lambda: Backlog(urgent=True, oldest_heartbeat_ms=None)  # noqa: E731
    assert run(last_run=NOW - 1, backlog=urgent, pace=PACE)
    assert decide(NOW, defer_ms=DEFER, last_run_ms=NOW - 1, pending=True, backlog=never_asked,
                  next_deadline=lambda: None, waiting_records=5000, full_batch=5000, pace_ms=PACE)


@pytest.mark.parametrize("since, expected", [(PACE - 1, False), (PACE, True)])
def test_what_no_change_asks_for_runs_no_sooner_than_the_pace_after_the_previous_batch(since, expected):
    old = lambda: Backlog(urgent=False, oldest_heartbeat_ms=NOW - DEFER)  # noqa: E731
    assert run(last_run=NOW - since, pending=False, deadline=NOW - 5, pace=PACE) is expected  # a due timeout
    assert run(last_run=NOW - since, backlog=old, pace=PACE) is expected  # heartbeats past their deferral
    assert run(last_run=NOW - since, defer=0, pending=False, pace=PACE) is expected  # nothing may wait


def test_the_next_look_is_when_the_pace_allows_a_batch_then_the_earliest_timeout():
    assert next_look_ms(NOW, last_run_ms=NOW - 100, pace_ms=PACE, deadline_ms=NOW - 5, defer_ms=DEFER) == NOW + 400
    assert next_look_ms(NOW, last_run_ms=NOW - PACE, pace_ms=PACE, deadline_ms=NOW + 7, defer_ms=DEFER) == NOW + 7
    # nothing waits and no timeout: the idle safety net
    assert next_look_ms(NOW, last_run_ms=NOW - PACE, pace_ms=PACE, deadline_ms=None, defer_ms=DEFER) \
        == NOW - PACE + IDLE_BATCH_MS
    # waiting signals: when the oldest has waited defer_ms, or defer_ms passed without a batch
    assert next_look_ms(NOW, last_run_ms=NOW - PACE, pace_ms=PACE, deadline_ms=None, defer_ms=DEFER, pending=True,
                        oldest_signal_ms=NOW - 3 * PACE) == NOW - 3 * PACE + DEFER
    assert next_look_ms(NOW, last_run_ms=NOW - 4 * DEFER, pace_ms=PACE, deadline_ms=None, defer_ms=DEFER,
                        pending=True, oldest_signal_ms=NOW - 100) == NOW - 4 * DEFER + DEFER
    # nothing may wait: as soon as the pace allows
    assert next_look_ms(NOW, last_run_ms=NOW - 100, pace_ms=PACE, deadline_ms=None) == NOW + 400


@pytest.mark.parametrize("seed", range(20))
def test_decide_says_no_before_the_next_look_and_yes_at_it(seed):
    """`next_look_ms` is exact for `decide` without new records: a trigger that waits until then
    for records delays no batch."""
    import random
    rnd = random.Random(seed)
    for _ in range(200):
        last = NOW - rnd.randrange(0, 2 * IDLE_BATCH_MS)
        pending = rnd.random() < 0.5
        oldest = NOW - rnd.randrange(0, 3 * DEFER) if pending and rnd.random() < 0.8 else None
        deadline = NOW + rnd.randrange(-DEFER, 3 * DEFER) if rnd.random() < 0.5 else None
        defer = rnd.choice([0, DEFER])
        look = next_look_ms(NOW, last_run_ms=last, pace_ms=PACE, deadline_ms=deadline, defer_ms=defer, pending=pending,
                            oldest_signal_ms=oldest)
        backlog = lambda o=oldest: Backlog(False, o)  # noqa: E731
        for t in (look - 1, look):
            said = decide(t, defer_ms=defer, last_run_ms=last, pending=pending, backlog=backlog,
                          next_deadline=lambda d=deadline: d, pace_ms=PACE)
            assert said is (t >= look), (t, look, last, pending, oldest, deadline, defer)


def test_nothing_is_scanned_or_read_when_a_cheaper_rule_decided():
    def no_deadline() -> int | None:
        raise AssertionError("the progress record should not have been read")
    assert decide(NOW, defer_ms=DEFER, last_run_ms=0, pending=True, backlog=never_asked, next_deadline=no_deadline)


def test_pending_ranges_are_the_kafka_partitions_that_move():
    start = {"0": 5, "1": 7, TICK: 3}
    assert pending_ranges(start, {"0": 5, "1": 9, TICK: 3}) == {1: (7, 9)}
    assert pending_ranges(start, {"0": 5, "1": 7, TICK: 3}) == {}


def test_no_batch_returns_the_start_offsets():
    start = {"0": 5, TICK: 3}
    assert offsets_to_run(start, {"0": 9}, run=False) == start


def test_a_batch_with_records_keeps_the_tick():
    assert offsets_to_run({"0": 5, TICK: 3}, {"0": 9}, run=True) == {"0": 9, TICK: 3}


def test_a_batch_without_records_bumps_the_tick_so_spark_runs_it():
    assert offsets_to_run({"0": 5, TICK: 3}, {"0": 5}, run=True) == {"0": 5, TICK: 4}
    assert offsets_to_run({"0": 5}, {"0": 5}, run=True) == {"0": 5, TICK: 1}
