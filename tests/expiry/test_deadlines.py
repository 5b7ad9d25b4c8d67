"""The sink's deadline book: reported timeouts, and the seeds a restarted job starts from."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from liveness.deadlines import DeadlineBook

RECHECK = 5_000
FLUSH = 60_000


def test_the_earliest_reported_timeout_is_next_and_none_forgets_the_group():
    book = DeadlineBook(recheck_ms=RECHECK)
    assert book.next_deadline() is None
    book.update({"a": 9_000, "b": 7_000}, now_ms=1_000)
    assert book.next_deadline() == 7_000
    book.update({"b": None}, now_ms=2_000)
    assert book.next_deadline() == 9_000
    book.update({"a": 20_000}, now_ms=3_000)  # the newest report replaces the older one
    assert book.next_deadline() == 20_000


def test_a_seed_is_the_groups_earliest_live_entry_and_a_report_replaces_it():
    book = DeadlineBook(recheck_ms=RECHECK)
    book.seed([("g", 100_000, 120_000), ("g", 90_000, 120_000), ("h", 100_000, 10_000)], FLUSH)
    assert book.next_deadline() == 110_000  # h: 100 s + 10 s
    book.update({"h": 300_000}, now_ms=111_000)
    assert book.next_deadline() == 210_000  # g's earlier address: 90 s + 120 s
    book.update({"g": 250_000}, now_ms=112_000)
    assert book.next_deadline() == 250_000


def test_an_unheard_seed_that_passed_is_looked_at_again_until_it_cannot_hold_a_timeout():
    book = DeadlineBook(recheck_ms=RECHECK)
    book.seed([("g", 0, 10_000)], FLUSH)
    looks = []
    now = 0
    while (d := book.next_deadline()) is not None:
        now = max(now, d)
        looks.append(now)
        book.update({}, now_ms=now)
    assert looks[0] == 10_000
    assert all(b - a == RECHECK for a, b in itertools.pairwise(looks))
    assert looks[-1] == 10_000 + FLUSH + RECHECK  # the latest timeout the state can hold, then forgotten


@given(last_update=st.integers(0, 10**9), timeout=st.integers(1, 600_000), trail=st.integers(0, FLUSH),
       batch_lag=st.integers(0, 4_000))
def test_after_a_restart_a_due_expiry_waits_at_most_one_recheck(last_update, timeout, trail, batch_lag):
    """broker_live trails the state by up to one flush window (`trail`); batches run when the book
    says (plus `batch_lag` until the sink hears of them). Spark calls the group at the first batch at
    or after its true timeout: that batch comes at most RECHECK + batch_lag after it."""
    true_deadline = last_update + trail + timeout + 1
    book = DeadlineBook(recheck_ms=RECHECK)
    book.seed([("g", last_update, timeout)], FLUSH)
    now = 0
    while True:
        d = book.next_deadline()
        assert d is not None, "the book forgot a group whose timeout is still pending"
        now = max(now, d)
        if now >= true_deadline:
            assert now - true_deadline <= RECHECK + batch_lag
            break
        book.update({}, now_ms=now + batch_lag)
