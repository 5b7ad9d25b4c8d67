"""Ours and RocketMQ's NameServer under the same broker fleet, driven over RocketMQ's protocol.

The driver is the same for both sides (`bench/broker_fleet.py`): brokers register over remoting
(100 topics each and a default broker's system topics, each broker on its own connection, kept
open since closing it unregisters the broker), then heartbeat (904, one-way) every 30 s, each on
its own timer, while clients look their topics up every 30 s.
Measured per side: CPU and RSS of its processes while the fleet heartbeats, the time from a
registration to its route being answered, and the time from a broker's last heartbeat to its
route disappearing (heartbeatTimeoutMillis 10 s). Every loop is bounded.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from bench import broker_fleet
from bench.system import cpu_seconds
from ops.procs import processes, pss_kib
from remoting import codes
from remoting.client import RemotingClient, registration_request

CLUSTER = broker_fleet.CLUSTER
FRESH_LIMIT_S = 60.0


def wait_route(c: RemotingClient, topic: str, *, present: bool, timeout_s: float) -> float:
    """Seconds until `topic`'s route is (or is no longer) answered, polled every 10 ms."""
    started = time.monotonic()
    while (c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}).code == codes.SUCCESS) != present:
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"{topic} still {'absent' if present else 'present'} after {timeout_s:.0f} s")
        time.sleep(0.01)
    return time.monotonic() - started


def cost(pids: Callable[[], list[int]], seconds: float, meter: CpuMeter | None = None) -> dict[str, float]:
    """CPU (% of one core), RSS summed and PSS summed (MiB; shared pages counted once) of the
    side's processes over `seconds` (`CpuMeter`: those that start or end within it included)."""
    meter = meter or CpuMeter(pids)
    t0 = time.monotonic()
    meter.run_for(seconds)
    cpu_s, t1 = meter.total(), time.monotonic()
    now = set(pids())
    rss = sum(p.rss_kib for p in processes() if p.pid in now) / 1024
    return {"cpu_pct": 100 * cpu_s / (t1 - t0), "rss_mib": rss, "pss_mib": sum(pss_kib(pid) for pid in now) / 1024}


class CpuMeter:
    """CPU seconds of a side's processes over a window, looked at every second: a process there at
    the start counts from its time then; one that starts within the window (a Python worker Spark
    forks for a batch) counts whole; one that ends within it counts up to its last look (at most a
    second of it is missed). Each process counts its own time only (utime + stime): its ended
    children's, which the kernel adds to it, are counted as those children."""

    def __init__(self, pids: Callable[[], list[int]]) -> None:
        self.pids = pids
        self.first = {pid: cpu_seconds([pid], children=False) for pid in pids()}
        self.last = dict(self.first)

    def look(self) -> None:
        for pid in self.pids():
            self.first.setdefault(pid, 0.0)
            self.last[pid] = max(self.last.get(pid, 0.0), cpu_seconds([pid], children=False))

    def run_for(self, seconds: float) -> None:
        stop = time.monotonic() + seconds
        while (left := stop - time.monotonic()) > 0:
            time.sleep(min(1.0, left))
            self.look()

    def total(self) -> float:
        return sum(self.last[pid] - self.first[pid] for pid in self.last)

    def by_pid(self) -> dict[int, float]:
        return {pid: self.last[pid] - self.first[pid] for pid in self.last}


def freshness(addr: str, probes: int, keys: dict[str, str]) -> dict[str, Any]:
    """REGISTER_BROKER answered → its new topic's route answered."""
    out: list[float] = []
    with RemotingClient(addr, **keys) as broker, RemotingClient(addr) as reader:  # type: ignore[arg-type]
        for i in range(probes):
            topics: dict[str, dict[str, Any]] = {f"VsFresh-{i}": {}, f"VsFreshBase-{i}": {}}
            t0 = time.monotonic()
            answer = broker.register_broker(cluster=CLUSTER, broker_name=f"vs-fresh-{i}", broker_id=0,
                                            addr=f"10.19.0.{i % 250}:{10911 + i // 250}", topics=topics)
            assert answer.code == codes.SUCCESS, answer.remark
            try:
                wait_route(reader, f"VsFresh-{i}", present=True, timeout_s=FRESH_LIMIT_S)
            except TimeoutError:  # a finding, not a crash: the row says so
                return {"p50_s": None, "max_s": None, "n": len(out),
                        "error": f"probe {i}'s route not answered within {FRESH_LIMIT_S:.0f} s"}
            out.append(time.monotonic() - t0)
            time.sleep(0.37)  # de-phase from the job's trigger
    return {"p50_s": statistics.median(out), "max_s": max(out), "n": probes}


def expiry(addr: str, probes: int, keys: dict[str, str], timeout_ms: int = 10_000) -> dict[str, Any]:
    """Brokers (heartbeatTimeoutMillis 10 s) heartbeat once and fall silent, connections open:
    seconds from that heartbeat to their route disappearing."""
    conns = [RemotingClient(addr, **keys) for _ in range(probes)]  # type: ignore[arg-type]
    try:
        # all at once, as brokers starting together would: one after the other, the first would
        # wait for the others' answers without heartbeating, longer than its timeout where a
        # registration takes seconds to be answered (ours under a 10,000-broker fleet)
        for i, c in enumerate(conns):
            c.send(codes.REGISTER_BROKER, *registration_request(
                cluster=CLUSTER, broker_name=f"vs-exp-{i}", broker_id=0, addr=f"10.18.0.{i}:10911",
                topics={f"VsExp-{i}": {}, f"VsExpBase-{i}": {}}, ext={"heartbeatTimeoutMillis": str(timeout_ms)}))
        for c in conns:
            answer = c.receive()
            assert answer.code == codes.SUCCESS, answer.remark
        def beat() -> None:
            for i, c in enumerate(conns):
                c.call(codes.BROKER_HEARTBEAT, {"clusterName": CLUSTER, "brokerAddr": f"10.18.0.{i}:10911",
                                                "brokerName": f"vs-exp-{i}"})

        with RemotingClient(addr) as reader:
            # alive (heartbeating every second) until every probe's route is answered: a NameServer
            # whose answers lag its log must not see them expire before they were ever visible
            deadline = time.monotonic() + 120
            while not all(reader.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": f"VsExp-{i}"}).code == codes.SUCCESS
                          for i in range(probes)):
                if time.monotonic() > deadline:
                    return {"p50_s": None, "max_s": None, "n": 0, "timeout_ms": timeout_ms,
                            "error": "the probes' routes were not answered within 120 s of their registration"}
                beat()
                time.sleep(1)
            beat()
            last = time.monotonic()
            gone = []
            for i in range(probes):
                wait_route(reader, f"VsExp-{i}", present=False, timeout_s=timeout_ms / 1000 + 90)
                gone.append(time.monotonic() - last)
        return {"p50_s": statistics.median(gone), "max_s": max(gone), "n": probes, "timeout_ms": timeout_ms}
    finally:
        for c in conns:
            c.close()
