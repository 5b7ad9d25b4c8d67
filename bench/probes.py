"""Measurements against a running System. Every loop is bounded (counts or deadlines)."""

from __future__ import annotations

import os
import signal
import statistics
import threading
import time
from typing import Any

from bench.system import System
from ops.procs import tree
from pipelines import writer_lease
from schemas import events as ev

CLUSTER = "BenchCluster"


def addr(g: int, bid: int = 0) -> str:
    return f"127.0.0.1:{20000 + (g % 20000) * 2 + bid}"


def registration(g: int, topics: int, *, prefix: str = "bench", topic_prefix: str = "BenchTopic",
                 timeout_ms: int | None = None) -> dict[str, Any]:
    names = [f"{topic_prefix}-{g}-{i}" for i in range(topics)]
    return ev.register_broker_event(cluster=CLUSTER, broker_name=f"{prefix}-{g}", broker_id=0, addr=addr(g),
                                    topics={n: ev.topic_config(n, read=4, write=4) for n in names},
                                    timeout_ms=timeout_ms)


def heartbeat(g: int, prefix: str = "bench") -> dict[str, Any]:
    return ev.heartbeat_event(cluster=CLUSTER, broker_name=f"{prefix}-{g}", broker_id=0, addr=addr(g))


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


def register_fleet(sys_: System, groups: int, topics: int, *, timeout_ms: int | None = None) -> None:
    for start in range(0, groups, 200):
        sys_.publish([registration(g, topics, timeout_ms=timeout_ms) for g in range(start, min(groups, start + 200))])


class Fleet:
    """`groups` registered brokers heartbeating every `period_s`, spread evenly over the period
    (as a real fleet is), from a background thread."""

    def __init__(self, sys_: System, groups: int, *, topics: int = 2, period_s: float = 30.0,
                 register: bool = True) -> None:
        self.sys, self.groups, self.period = sys_, groups, period_s
        if register:
            register_fleet(sys_, groups, topics)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Fleet:
        self._thread.start()
        return self

    def _run(self) -> None:
        tick, g = 0.5, 0
        per_tick = max(1, round(self.groups * tick / self.period))
        while not self._stop.wait(tick):
            batch = [heartbeat((g + i) % self.groups) for i in range(per_tick)]
            g = (g + per_tick) % self.groups
            self.sys.publish(batch)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def freshness(sys_: System, probes: int) -> dict[str, Any]:
    """REGISTER_BROKER published → its topic's route served (polled every 10 ms)."""
    latencies = []
    for i in range(probes):
        topic = f"FreshTopic-{i}-0"
        t0 = time.monotonic()
        sys_.publish([registration(i, 1, prefix="fresh", topic_prefix="FreshTopic") | {
            "topicConfigTable": {topic: ev.topic_config(topic), "FreshBase": ev.topic_config("FreshBase")}}])
        deadline = t0 + 30
        while sys_.route_status(topic) != 200:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic} not served after 30 s")
            time.sleep(0.01)
        latencies.append(time.monotonic() - t0)
        time.sleep(0.37)  # de-phase from the trigger
    return {"p50_s": statistics.median(latencies), "p99_s": percentile(latencies, 99), "max_s": max(latencies),
            "n": len(latencies)}


def expiry(sys_: System, brokers: int, timeout_ms: int = 5000) -> dict[str, Any]:
    """Brokers register, then fall silent; overshoot = removal served − (registration + timeout)."""
    topics = [f"ExpTopic-{i}-0" for i in range(brokers)]
    sys_.publish([registration(i, 1, prefix="exp", topic_prefix="ExpTopic", timeout_ms=timeout_ms) | {
        "topicConfigTable": {topics[i]: ev.topic_config(topics[i]), "ExpBase": ev.topic_config("ExpBase")}}
        for i in range(brokers)])
    # The registration is the brokers' last sign of life (as in RocketMQ: a registration renews the
    # broker's lastUpdateTimestamp). A heartbeat after it would wait for company for up to
    # NAMESRV_HEARTBEAT_DEFER_MS (25 s), longer than this timeout, which a default broker's never is
    # (120 s against 30 s heartbeats): the expiry would then wait for the batch that applies it.
    last_beat = time.monotonic()  # acknowledged: the record time is at or before this
    deadline = last_beat + 30
    while any(sys_.route_status(t) != 200 for t in topics):
        if time.monotonic() > deadline:
            raise TimeoutError("expiry probes were not registered")
        time.sleep(0.05)
    gone: dict[str, float] = {}
    deadline = last_beat + timeout_ms / 1000 + 60
    while len(gone) < brokers and time.monotonic() < deadline:
        for t in topics:
            if t not in gone and sys_.route_status(t) == 404:
                gone[t] = time.monotonic()
        time.sleep(0.02)
    if len(gone) < brokers:
        raise TimeoutError(f"{brokers - len(gone)} silent brokers were never expired")
    over = [g - last_beat - timeout_ms / 1000 for g in gone.values()]
    return {"p50_s": statistics.median(over), "max_s": max(over), "n": brokers, "timeout_ms": timeout_ms}


def idle_cost(sys_: System, seconds: float) -> dict[str, Any]:
    """CPU of the job's processes (driver, JVM, Python workers) per wall second, as % of one core."""
    c0, t0 = sys_.job_cpu(), time.monotonic()
    time.sleep(seconds)
    c1, t1 = sys_.job_cpu(), time.monotonic()
    return {"core_pct": 100 * (c1 - c0) / (t1 - t0), "seconds": round(t1 - t0, 1)}


def ingestion_step(sys_: System, groups: int, rate: int, seconds: float) -> dict[str, Any]:
    """Heartbeats at `rate`/s for `seconds`; lag sampled each second. Heartbeats may wait up to
    NAMESRV_HEARTBEAT_DEFER_MS by design, so the backlog is a saw-tooth up to that much input.
    Sustained = the last third's peak backlog exceeds the middle third's by at most half of it
    or two seconds of input (a rate above capacity grows it by far more), it drains within the
    deferral + 15 s after the load stops, and the publisher kept up."""
    tick = 0.1
    per_tick = max(1, round(rate * tick))
    lags: list[int] = []
    g = 0
    start = time.monotonic()
    next_tick, next_sample = start, start + 1
    sent0 = sys_.sent
    cpu0 = sys_.job_cpu()
    while time.monotonic() - start < seconds:
        now = time.monotonic()
        if now >= next_tick:
            sys_.publish([heartbeat((g + i) % groups) for i in range(per_tick)])
            g = (g + per_tick) % groups
            next_tick += tick
        if now >= next_sample:
            lags.append(sys_.lag())
            next_sample += 1
        time.sleep(max(0.0, min(next_tick, next_sample) - time.monotonic()))
    achieved = (sys_.sent - sent0) / (time.monotonic() - start)
    try:
        drain = sys_.wait_consumed(timeout_s=sys_.cfg.heartbeat_defer_ms / 1000 + 15)
    except TimeoutError:
        drain = None
    # CPU of the job until the step's input is consumed: what those heartbeats cost (an
    # unconsumed tail would make it look cheaper, so only a drained step counts).
    cpu_ms = 1000 * (sys_.job_cpu() - cpu0) / max(1, sys_.sent - sent0) if drain is not None else None
    third = max(1, len(lags) // 3)
    middle, last = lags[third:2 * third] or [0], lags[2 * third:] or [0]
    sustained = (drain is not None and max(last) - max(middle) <= max(0.5 * max(middle), 2 * rate)
                 and achieved >= 0.95 * rate)
    return {"rate": rate, "achieved": round(achieved), "max_lag": max(lags or [0]), "mid_lag": max(middle),
            "late_lag": max(last), "drain_s": drain, "sustained": sustained, "cpu_ms_per_event": cpu_ms}


def ramp(sys_: System, groups: int, rates: list[int], seconds: float, label: str = "") -> list[dict[str, Any]]:
    """Ingestion steps at rising rates until one is not sustained."""
    steps = []
    for rate in rates:
        r = ingestion_step(sys_, groups, rate, seconds)
        steps.append(r)
        print(f"    {label}ramp {rate}/s: {r}", flush=True)
        if not r["sustained"]:
            break
    return steps


def best_rate(steps: list[dict[str, Any]]) -> int:
    """The highest rate a ramp sustained (0: none)."""
    return max((r["achieved"] for r in steps if r["sustained"]), default=0)


def wait_topic(sys_: System, topic: str, timeout_s: float = 300) -> float:
    t0 = time.monotonic()
    while sys_.route_status(topic) != 200:
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"{topic} not served after {timeout_s:.0f} s")
        time.sleep(0.1)
    return time.monotonic() - t0


def restart(sys_: System, kills: int) -> dict[str, Any]:
    """SIGKILL the active job (the fleet keeps heartbeating); a registration published right
    after the kill is served how long after it? Without a standby that is the launcher's
    restart, the job's start (JVM, SparkSession, state restore), its first batch and one refresh;
    with one (NAMESRV_JOB_STANDBY), the standby's query start and first batch. Between kills the
    job stays up past the launcher's backoff reset (60 s), so every kill is a first restart."""
    times: list[float] = []
    for i in range(kills):
        if i:
            time.sleep(62)
        active = writer_lease.holder(sys_.cfg.store_root)  # with a standby, the one running the query
        assert active is not None and active in {p.pid for p in tree(sys_.launcher_pid())}, "no active job"
        os.kill(active, signal.SIGKILL)
        t0 = time.monotonic()
        topic = f"RestartTopic-{i}"
        sys_.publish([registration(i, 1, prefix="restart", topic_prefix="RestartTopic") | {
            "topicConfigTable": {topic: ev.topic_config(topic), "RestartBase": ev.topic_config("RestartBase")}}])
        wait_topic(sys_, topic, 180)
        times.append(time.monotonic() - t0)
        print(f"    job killed → new registration served in {times[-1]:.1f} s", flush=True)
    return {"p50_s": statistics.median(times), "max_s": max(times), "n": kills, "all_s": times}

