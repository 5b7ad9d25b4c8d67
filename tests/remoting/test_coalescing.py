"""The front's coalescing window (liveness.coalescing), without a loop or a log: what waits per
address, what a small repeat keeps, and what a flush hands out."""

from __future__ import annotations

from typing import Any

from liveness.coalescing import Coalescer
from schemas import events as ev

A, B = "127.0.0.1:10911", "127.0.0.1:10921"


def hb(addr: str, ts: int, *, cluster: str = "C", broker_id: int | None = None) -> dict[str, Any]:
    return ev.heartbeat_event(cluster=cluster, broker_name="b", broker_id=broker_id, addr=addr, timestamp=ts)


def small(addr: str, offset: int = 7) -> dict[str, Any]:
    """A registration's small repeat as the front keeps it (no timestamp)."""
    full = ev.register_broker_event(cluster="C", broker_name="b", broker_id=0, addr=addr, timestamp=1)
    return ev.repeated_registration_event(full, [offset], "digest")


def test_the_newest_signal_of_an_address_waits_and_addresses_keep_their_order():
    c = Coalescer()
    c.signal(hb(A, 1))
    c.signal(hb(B, 2))
    c.signal(hb(A, 3, broker_id=0))  # a 322 after a 904: the newer one, whole
    assert len(c) == 2
    assert c.flush() == [hb(A, 3, broker_id=0), hb(B, 2)]


def test_the_same_address_in_another_cluster_is_another_signal():
    c = Coalescer()
    c.signal(hb(A, 1, cluster="C1"))
    c.signal(hb(A, 2, cluster="C2"))
    assert [e["clusterName"] for e in c.flush()] == ["C1", "C2"]


def test_a_waiting_small_repeat_keeps_its_repeats_and_takes_a_later_heartbeats_time():
    c = Coalescer()
    repeat = small(A)
    c.signal(hb(A, 1))
    c.repeat(repeat, 5)  # the repeat replaces the heartbeat that waited
    c.signal(hb(A, 9))
    [out] = c.flush()
    assert out["type"] == repeat["type"] and out["repeats"] == repeat["repeats"] and out["timestamp"] == 9
    assert "timestamp" not in repeat  # the front's copy of the small event is not stamped


def test_a_newer_repeat_replaces_a_waiting_one():
    c = Coalescer()
    c.repeat(small(A, 7), 5)
    c.repeat(small(A, 8), 6)
    [out] = c.flush()
    assert (out["repeats"]["offsets"], out["timestamp"]) == ([8], 6)


def test_flush_empties_the_window_and_forget_drops_an_address():
    c = Coalescer()
    assert c.flush() == []
    c.signal(hb(A, 1))
    c.signal(hb(B, 1))
    c.forget(("C", A))
    c.forget(("C", "127.0.0.1:1"))  # nothing waits for it: nothing happens
    assert c.flush() == [hb(B, 1)]
    assert len(c) == 0 and c.flush() == []
    c.signal(hb(A, 2))  # a heartbeat after a flush waits on its own again
    assert c.flush() == [hb(A, 2)]


def test_a_groups_waiting_signals_are_taken_in_order_and_others_keep_waiting():
    c = Coalescer()
    other = {**hb("127.0.0.1:10931", 2), "brokerName": "other"}
    c.signal(hb(A, 1))
    c.signal(other)
    c.repeat(small(B), 3)
    assert c.take({"b"}) == [hb(A, 1), {**small(B), "timestamp": 3}]
    assert c.take({"b"}) == [] and c.flush() == [other]
