"""Liveness on the receiver's clock (`pipelines.offset_log.LogClock` through `run_group`).

RocketMQ stamps lastUpdateTimestamp with its own clock when a request arrives and expires on
that clock. Here the receive time is the record's log time bounded by what the job has read
(the batch's log clock), and expiry runs at that clock: producer clocks that run ahead or
behind change nothing, and a backlog read after an outage expires nobody whose heartbeats
are still unread.
"""

from __future__ import annotations

import pytest

from pipelines.batch_context import BatchContext
from pipelines.offset_log import LOG_CLOCK, RESUMED, LogClock
from pipelines.step import StepConfig, run_group
from pipelines.step_rows import DEADLINE, changes_of
from routeinfo.housekeeping import RECHECK_MS
from routeinfo.state import GroupState
from schemas import tables as t
from tests.helpers import hb, reg, routing_config, topics

T0 = 1_700_000_000_000
TIMEOUT = 120_000
CFG = StepConfig(routing_config(default_timeout_ms=TIMEOUT), max_message_bytes=1 << 20, max_clock_skew_ms=10**9)


def record(event, offset, ts, key="bn"):
    from schemas import events as ev
    return {"partition": 0, "offset": offset, "timestamp": ts, "key": key, "value": ev.encode(event)[1]}


def addrs(state):
    return None if state is None else GroupState.from_parts(*state).broker.addrs


def changes(rows):
    return [c["kind"] for r in rows if r["target"] == t.ROUTE_CHANGES.name for c in changes_of(r["body"])]


def test_a_member_whose_clock_runs_ahead_expires_nobody():
    """Audit D2-a: the slave's host is 125 s ahead; RocketMQ keeps the master (both live)."""
    master = reg("bn", 0, "10.0.0.1:10911", tps=topics("T1", "T2"))
    state, _, _ = run_group("bn", [record(master, 0, T0)], None, T0, CFG, LogClock(until={0: T0}))
    slave = reg("bn", 1, "10.0.0.2:10911", tps=topics("T1", "T2"))
    now = T0 + 200
    state, _, rows = run_group("bn", [record(slave, 1, T0 + 125_000)], state, now, CFG, LogClock(since={0: T0}, until={0: now}))
    assert addrs(state) == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
    assert "BROKER_EXPIRED" not in changes(rows)
    live = GroupState.from_parts(*state).live
    assert live[("DefaultCluster", "10.0.0.2:10911")].last_update == now  # never after processing time


def test_a_broker_whose_clock_lags_is_registered_and_stays():
    """Audit D2-b: the host is 130 s behind; its records still arrived after the previous batch."""
    now = T0 + 100
    state, deadline, rows = run_group("bn", [record(reg("bn", 0, "10.0.0.1:10911"), 0, T0 - 130_000)], None, now,
                                      CFG, LogClock(since={0: T0}, until={0: now}))
    assert addrs(state) == {0: "10.0.0.1:10911"}
    assert deadline == T0 + TIMEOUT + 1 and "BROKER_EXPIRED" not in changes(rows)


def test_without_a_lower_bound_a_lagging_clock_is_taken_at_its_word():
    """What the bound prevents (Spark's connector has no log clock): the same record expires at once."""
    now = T0 + 100
    state, _, rows = run_group("bn", [record(reg("bn", 0, "10.0.0.1:10911"), 0, T0 - 130_000)], None, now, CFG)
    assert state is None and "BROKER_EXPIRED" in changes(rows)


def test_catch_up_expires_nobody_whose_heartbeats_are_still_unread():
    """Audit D2-c: the job was down for 3 minutes. Its first batch after the restart runs at
    T0+180 s but has read the log only up to T0+40 s: the broker heartbeated at T0+30 s (read),
    and its later heartbeats are further on. It must not expire; once the log clock passes
    its deadline without a heartbeat, it does."""
    state, _, _ = run_group("bn", [record(reg("bn", 0, "10.0.0.1:10911"), 0, T0)], None, T0, CFG, LogClock(until={0: T0}))
    now = T0 + 180_000
    state, deadline, rows = run_group("bn", [record(hb("bn", 0, "10.0.0.1:10911"), 1, T0 + 30_000)], state, now,
                                      CFG, LogClock(since={0: T0}, until={0: T0 + 40_000}))
    assert addrs(state) == {0: "10.0.0.1:10911"} and "BROKER_EXPIRED" not in changes(rows)
    # Past processing time, not past the log: looked at again when the log may have reached the
    # deadline, but at least every RECHECK_MS (not at every batch).
    assert deadline == now + min(T0 + 30_000 + TIMEOUT + 1 - (T0 + 40_000), RECHECK_MS)
    # A later catch-up batch without this group's records (its Spark timeout fired): still alive.
    state, _, rows = run_group("bn", [], state, now + 500, CFG, LogClock(since={0: T0 + 40_000}, until={0: T0 + 100_000}))
    assert addrs(state) == {0: "10.0.0.1:10911"} and "BROKER_EXPIRED" not in changes(rows)
    # The log has been read past T0+150 s and nothing came from it: it is gone.
    state, _, rows = run_group("bn", [], state, now + 1000, CFG, LogClock(since={0: T0 + 100_000}, until={0: T0 + 150_001}))
    assert state is None and "BROKER_EXPIRED" in changes(rows)


def test_a_group_waiting_on_the_log_is_looked_at_when_the_log_may_have_caught_up():
    """A deadline the wall clock passed but the log has not: the next look is when the log may
    reach it (here 300 ms of log time away), not at every batch; with the log further behind,
    RECHECK_MS later. A deadline still ahead of the wall clock is kept as it is."""
    state, deadline, _ = run_group("bn", [record(reg("bn", 0, "10.0.0.1:10911"), 0, T0)], None, T0, CFG,
                                   LogClock(until={0: T0}))
    assert deadline == T0 + TIMEOUT + 1
    due = T0 + TIMEOUT + 1
    _, near, _ = run_group("bn", [], state, due + 2_000, CFG, LogClock(since={0: T0}, until={0: due - 300}))
    assert near == due + 2_000 + 300
    _, far, _ = run_group("bn", [], state, due + 2_000, CFG, LogClock(since={0: T0}, until={0: T0 + 1_000}))
    assert far == due + 2_000 + RECHECK_MS
    _, ahead, _ = run_group("bn", [], state, due - 1, CFG, LogClock(since={0: T0}, until={0: T0 + 1_000}))
    assert ahead == due


def test_the_processing_time_timeout_alone_would_have_expired_it():
    """The same catch-up judged on the wall clock (no log clock): the false expiry the clock prevents."""
    state, _, _ = run_group("bn", [record(reg("bn", 0, "10.0.0.1:10911"), 0, T0)], None, T0, CFG)
    state, _, rows = run_group("bn", [record(hb("bn", 0, "10.0.0.1:10911"), 1, T0 + 30_000)], state, T0 + 180_000, CFG)
    assert state is None and "BROKER_EXPIRED" in changes(rows)


def test_a_late_registration_never_moves_liveness_backwards():
    state, _, _ = run_group("bn", [record(reg("bn", 0, "10.0.0.1:10911"), 0, T0),
                                   record(hb("bn", 0, "10.0.0.1:10911"), 1, T0 + 50_000)], None, T0 + 50_000, CFG)
    state, _, _ = run_group("bn", [record(reg("bn", 0, "10.0.0.1:10911"), 2, T0 + 10_000)], state, T0 + 60_000, CFG)
    assert GroupState.from_parts(*state).live[("DefaultCluster", "10.0.0.1:10911")].last_update == T0 + 50_000


@pytest.mark.parametrize(("clock", "record_time", "now", "expected"), [
    (LogClock(), 5, 10, 5), (LogClock(), 15, 10, 10),
    (LogClock(since={0: 7}), 5, 10, 7), (LogClock(since={0: 7}, until={0: 8}), 9, 10, 8),
    (LogClock(since={0: 12}), 5, 10, 10),  # a bound after now is no bound: never later than processing time
    (LogClock(until={0: 20}), 15, 10, 10),
    (LogClock(since={1: 7}, until={1: 8}), 9, 10, 9)])  # another partition's bounds do not apply
def test_receive_time_is_bounded_by_its_partitions_log_and_by_now(clock, record_time, now, expected):
    assert clock.receive_time(record_time, 0, now) == expected


def test_expiry_runs_at_the_groups_partition_clock_or_the_earliest():
    clock = LogClock(until={0: 100, 1: 40})
    assert clock.expiry_time(1000, {0}) == 100
    assert clock.expiry_time(1000, {1}) == 40
    assert clock.expiry_time(1000) == 40  # called by its timeout alone: the partition is not known
    assert clock.expiry_time(30, {0}) == 30 and LogClock().expiry_time(30) == 30


def test_a_lagging_partition_does_not_hold_back_another_partitions_records():
    """Partition 1 is read to T0+9 s, partition 0 only to T0+1 s: a heartbeat read in partition 1
    keeps its own time."""
    state, _, _ = run_group("bn", [record(reg("bn", 0, "10.0.0.1:10911"), 0, T0) | {"partition": 1}], None, T0, CFG,
                            LogClock(until={1: T0}))
    clock = LogClock(since={0: T0, 1: T0}, until={0: T0 + 1_000, 1: T0 + 9_000})
    state, _, _ = run_group("bn", [record(hb("bn", 0, "10.0.0.1:10911"), 1, T0 + 9_000) | {"partition": 1}], state,
                            T0 + 20_000, CFG, clock)
    assert GroupState.from_parts(*state).live[("DefaultCluster", "10.0.0.1:10911")].last_update == T0 + 9_000


def test_the_batch_context_carries_the_clock_of_the_source_s_offsets():
    """The source builds each batch's context from the offsets Spark hands it (the same on a
    replay): the log clock of the end offsets, never a partition itself."""
    start = {"0": 1, "1": 2, "tick": 1, LOG_CLOCK: {"0": 1000, "1": 1001}}
    end = {"0": 3, "1": 5, "tick": 1, LOG_CLOCK: {"0": 2000, "1": 2001}}
    context = BatchContext.planned(start, end, {})
    assert context.clock() == LogClock(until={0: 2000, 1: 2001})
    assert (context.start, context.end) == ({"0": 1, "1": 2}, {"0": 3, "1": 5})
    again, report = BatchContext.from_json(context.to_json(report=True))
    assert again == context and report
    assert BatchContext.planned(start, {"0": 4, "tick": 1}, {}).clock() == LogClock()  # planned before the clock

def test_deadline_row_follows_the_log_clock():
    _, _, rows = run_group("bn", [record(reg("bn", 0, "10.0.0.1:10911"), 0, T0 + 5)], None, T0 + 10, CFG,
                                  LogClock(since={0: T0}, until={0: T0 + 10}))
    assert [r["body"] for r in rows if r["target"] == DEADLINE] == [str(T0 + 5 + TIMEOUT + 1)]


def test_time_in_which_the_log_could_not_be_read_is_not_silence():
    """A Kafka outage longer than the timeout: no heartbeat could reach the log, so when it is
    back every broker is judged from then (the batch's `resumed` floor), not from its last
    heartbeat before the outage. Without the floor the same batch expires it."""
    state, _, _ = run_group("bn", [record(reg("bn", 0, "10.0.0.1:10911", timeout_ms=20_000), 0, T0)], None, T0, CFG,
                            LogClock(until={0: T0}))
    back = T0 + 60_000  # the log was unreachable from T0 + 5 s to T0 + 60 s
    kept, deadline, rows = run_group("bn", [], state, back + 500, CFG, LogClock(until={0: back + 500}, resumed=back))
    assert addrs(kept) == {0: "10.0.0.1:10911"} and "BROKER_EXPIRED" not in changes(rows)
    assert deadline == back + 20_000 + 1  # a full timeout from when the log came back
    # a heartbeat after the outage keeps it as usual; silence after the floor still expires it
    beat, _, _ = run_group("bn", [record(hb("bn", 0, "10.0.0.1:10911"), 1, back + 2_000)], kept, back + 2_100, CFG,
                           LogClock(until={0: back + 2_100}, resumed=back))
    assert addrs(beat) == {0: "10.0.0.1:10911"}
    gone, _, rows = run_group("bn", [], kept, back + 20_002, CFG, LogClock(until={0: back + 20_002}, resumed=back))
    assert gone is None and "BROKER_EXPIRED" in changes(rows)
    without, _, rows = run_group("bn", [], state, back + 500, CFG, LogClock(until={0: back + 500}))
    assert without is None and "BROKER_EXPIRED" in changes(rows)


def test_the_outage_floor_travels_in_the_batch_context():
    context = BatchContext.planned({}, {"0": 3, "tick": 1, LOG_CLOCK: {"0": 900}, RESUMED: 850}, {})
    assert context.clock() == LogClock(until={0: 900}, resumed=850)
    assert BatchContext.from_json(context.to_json())[0].clock().resumed == 850
    assert BatchContext.planned({}, {"0": 4, LOG_CLOCK: {"0": 950}}, {}).clock().resumed is None
