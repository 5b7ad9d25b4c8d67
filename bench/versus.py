"""Ours and RocketMQ's NameServer under the same broker fleet, driven over RocketMQ's protocol.

The driver is the same for both sides: brokers register over remoting (100 topics each, on a
pool of connections kept open, since closing a broker's connection unregisters it), then
heartbeat (904, one-way) every 30 s spread evenly over the period, as a real fleet does.
Measured per side: CPU and RSS of its processes while the fleet heartbeats, the time from a
registration to its route being answered, and the time from a broker's last heartbeat to its
route disappearing (heartbeatTimeoutMillis 10 s). Every loop is bounded.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from bench.system import cpu_seconds
from ops.procs import processes, pss_kib
from remoting import codes
from remoting.client import RemotingClient, registration_request

CLUSTER = "VsCluster"
POOL = 32  # connections carrying the fleet's registrations and heartbeats
FRESH_LIMIT_S = 60.0


def _addr(g: int) -> str:
    return f"10.{20 + g // 62500}.{g // 250 % 250}.{g % 250}:10911"


def _table(prefix: str, g: int, topics: int) -> dict[str, dict[str, Any]]:
    return {f"{prefix}-{g}-{i}": {"readQueueNums": 4, "writeQueueNums": 4} for i in range(topics)}


# How the fleet keeps itself alive after registering. A RocketMQ broker with default settings
# re-sends its whole REGISTER_BROKER every registerNameServerPeriod (30 s), data version unchanged
# (`BrokerController.start`: registerBrokerAll(true, false, forceRegister=true)); BROKER_HEARTBEAT
# (904) is sent only with enableSlaveActingMaster.
REGISTER, HEARTBEAT = "register", "heartbeat"


class RemotingFleet:
    """`brokers` registered over `POOL` connections, then alive every `period_s` from a thread:
    a full re-registration (`REGISTER`, the default broker's way) or a one-way 904 (`HEARTBEAT`)."""

    def __init__(self, addr: str, brokers: int, topics: int, *, period_s: float = 30.0, mode: str = HEARTBEAT,
                 access_key: str | None = None, secret_key: str | None = None) -> None:
        if mode not in (REGISTER, HEARTBEAT):
            raise ValueError(f"fleet mode {mode!r}: expected {REGISTER!r} or {HEARTBEAT!r}")
        self.addr, self.brokers, self.period, self.mode, self.topics = addr, brokers, period_s, mode, topics
        self.conns = [RemotingClient(addr, timeout_s=120, access_key=access_key, secret_key=secret_key)
                      for _ in range(POOL)]
        # Each broker builds its own request on its own host: built before the clock starts, so
        # that the driver's encoding is not counted as the side's time.
        built = [self._registration(g, topics) for g in range(brokers)]
        failures: list[str] = []
        self.refused_busy = 0  # first registrations refused by flow control, each sent again a period later
        workers = [threading.Thread(target=self._register, args=(i, built, failures), daemon=True)
                   for i in range(POOL)]
        self.started = started = time.monotonic()
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=3600)
        if failures:
            raise RuntimeError(f"{len(failures)} registrations refused by {addr}, e.g. {failures[0]}")
        self.register_s = time.monotonic() - started
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self.sent = 0
        self.failures: list[str] = []  # refused re-registrations
        # broker address -> epoch ms of its newest liveness signals sent (the last three)
        self.last_sent: dict[str, list[int]] = {}

    def _register(self, i: int, built: list[tuple[dict[str, str], bytes]], failures: list[str]) -> None:
        """Connection i's brokers, all sent before any answer is awaited: a fleet starting up is
        as many independent brokers, each with its own registration in flight (RocketMQ's
        `registerBrokerAll` waits up to 24 s for its answer), not a queue of them."""
        c, mine = self.conns[i], list(range(i, self.brokers, POOL))
        period_ends = self.started + self.period
        try:
            while mine:
                opaques = {c.send(codes.REGISTER_BROKER, *built[g]): g for g in mine}
                busy = []
                for _ in opaques:
                    answer = c.receive()
                    if answer.code == codes.SYSTEM_BUSY:
                        busy.append(opaques[answer.opaque])
                    elif answer.code != codes.SUCCESS:
                        failures.append(f"{answer.code} {answer.remark}")
                # SYSTEM_BUSY is the side's flow control (RocketMQ's "[OVERLOAD] system busy"): a
                # broker registers again at its next period, as `registerBrokerAll` runs every 30 s
                mine = sorted(busy)
                if mine:
                    self.refused_busy += len(mine)
                    time.sleep(max(0.0, period_ends - time.monotonic()))
                    period_ends += self.period
        except OSError as exc:  # the side closed the connection: a failure of the run, said at once
            failures.append(f"connection {i}: {type(exc).__name__}: {exc}")

    @staticmethod
    def _registration(g: int, topics: int) -> tuple[dict[str, str], bytes]:
        return registration_request(cluster=CLUSTER, broker_name=f"vs-{g}", broker_id=0, addr=_addr(g),
                                    topics=_table("VsTopic", g, topics))

    @staticmethod
    def _answer(c: RemotingClient, failures: list[str]) -> int:
        answer = c.receive()
        if answer.code != codes.SUCCESS:
            failures.append(f"{answer.code} {answer.remark}")
        return 1

    def start(self) -> RemotingFleet:
        self._thread.start()
        return self

    def _beat(self) -> None:
        """Ticks on the clock: a broker's timer fires every period whatever the other brokers'
        answers, so the next tick does not wait for this one's answers to add its own pause (a
        side answering a tick in 0.24 s was sent a third less than the fleet offers). A side that
        cannot answer a tick within the tick falls behind, and the ticks it missed are not sent
        in a burst later."""
        tick, g = 0.5, 0
        per_tick = max(1, round(self.brokers * tick / self.period))
        bodies = {}  # a broker re-sends the same registration: encoded once, as its bytes do not change
        due = time.monotonic() + tick
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            due = max(due + tick, time.monotonic())
            waiting: dict[int, int] = {}
            for _ in range(per_tick):
                conn = g % POOL
                if self.mode == HEARTBEAT:
                    self.conns[conn].send(codes.BROKER_HEARTBEAT, {
                        "clusterName": CLUSTER, "brokerAddr": _addr(g), "brokerName": f"vs-{g}"}, oneway=True)
                else:
                    if g not in bodies:
                        bodies[g] = self._registration(g, self.topics)
                    self.conns[conn].send(codes.REGISTER_BROKER, *bodies[g])
                    waiting[conn] = waiting.get(conn, 0) + 1
                self.last_sent[_addr(g)] = [*self.last_sent.get(_addr(g), [])[-2:], int(time.time() * 1000)]
                g = (g + 1) % self.brokers
                self.sent += 1
            for conn, n in waiting.items():  # a broker waits for its registration's answer
                for _ in range(n):
                    self._answer(self.conns[conn], self.failures)

    def close(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # started (a failed wave closes a fleet that never beat)
            self._thread.join(timeout=10)
        for c in self.conns:
            c.close()


def wait_route(c: RemotingClient, topic: str, *, present: bool, timeout_s: float) -> float:
    """Seconds until `topic`'s route is (or is no longer) answered, polled every 10 ms."""
    started = time.monotonic()
    while (c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}).code == codes.SUCCESS) != present:
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"{topic} still {'absent' if present else 'present'} after {timeout_s:.0f} s")
        time.sleep(0.01)
    return time.monotonic() - started


def cost(pids: Callable[[], list[int]], seconds: float) -> dict[str, float]:
    """CPU (% of one core), RSS summed and PSS summed (MiB; shared pages counted once) of the
    side's processes over `seconds`."""
    ids = pids()
    c0, t0 = cpu_seconds(ids), time.monotonic()
    time.sleep(seconds)
    c1, t1 = cpu_seconds(ids), time.monotonic()
    now = set(pids())
    rss = sum(p.rss_kib for p in processes() if p.pid in now) / 1024
    return {"cpu_pct": 100 * (c1 - c0) / (t1 - t0), "rss_mib": rss, "pss_mib": sum(pss_kib(pid) for pid in now) / 1024}


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
