"""Giving memory back (conf/memory.py): `ReleaseEvery` releases on its first call, then at most
once every `seconds` of its clock, and `release_now` releases whatever the time and restarts the
wait. Pure: a clock and a release function of the test's own."""

from __future__ import annotations

from conf.memory import ReleaseEvery


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_first_release_releases_then_at_most_once_every_seconds() -> None:
    clock, released = Clock(0.0), []
    every = ReleaseEvery(30.0, clock=clock, release=lambda: released.append(clock.now))
    assert every.release()  # at a monotonic clock's start too: the last release is at minus infinity
    assert not every.release()
    clock.now = 29.999
    assert not every.release()
    clock.now = 30.0  # exactly `seconds` later: due
    assert every.release()
    clock.now = 45.0
    assert not every.release()
    clock.now = 1000.0
    assert every.release()
    assert released == [0.0, 30.0, 1000.0]


def test_release_now_releases_whatever_the_time_and_restarts_the_wait() -> None:
    clock, released = Clock(100.0), []
    every = ReleaseEvery(30.0, clock=clock, release=lambda: released.append(clock.now))
    every.release_now()
    every.release_now()
    assert released == [100.0, 100.0]
    clock.now = 120.0
    assert not every.release()  # 20 s after the last, unconditional, release
    every.release_now()
    clock.now = 149.0
    assert not every.release()
    clock.now = 150.0
    assert every.release()
    assert released == [100.0, 100.0, 120.0, 150.0]
