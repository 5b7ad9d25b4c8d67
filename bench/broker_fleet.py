"""A broker fleet as RocketMQ brokers with default settings are, for the benchmarks: every broker
on its own TCP connection and its own timer, registering what a default 5.3.3 broker registers,
and clients looking their topics up beside it.

What a default broker sends a NameServer (`BrokerController.start`, 5.3.3):
- its whole REGISTER_BROKER every `registerNameServerPeriod` (30 s), data version unchanged
  (`forceRegister` true), the next run only once the last is answered (`scheduleAtFixedRate`);
  BROKER_HEARTBEAT (904, one-way) instead only with `enableSlaveActingMaster`;
- with `refreshMetadata`, GET_BROKER_CLUSTER_INFO (106) every 5 s.
Its topic table holds the 13 system topics of `TopicConfigManager.init` (`system_topics`; the
test of a real broker checks the list) beside its own. A default client (`MQClientInstance`)
looks up the route of each topic it uses every `pollNameServerInterval` (30 s) on its own
connection: here one client for every 10 brokers, each using 10 topics of one broker.

Every broker and client fires at its own phase of its period (drawn once, uniform), so the
signals arrive spread evenly, not in ticks. Connections: one per broker and one per client, up to
`MAX_CONNECTIONS`: every process on this machine has a hard limit of 20,000 open files
(RLIMIT_NOFILE, not raisable without CAP_SYS_RESOURCE, which the container lacks), and the
NameServer under test holds all of them in one process; past that, brokers (and clients) share
connections evenly, each still on its own timer. The brokers' loop runs on uvloop in a thread of
the bench's process, so its CPU is never counted as a side's. The clients run in a process of
their own (`bench.lookup_clients`), as clients run on hosts of their own: timed on the brokers'
loop, a lookup waited for whatever that loop was doing, and with 106 on at 10,000 brokers that
loop was a whole core reading cluster infos (lookups answered in 5 s by a NameServer whose front
used a fifth of a core). Every loop is bounded by `close`.
"""

from __future__ import annotations

import asyncio
import random
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bench.fleet_wire import Conn, Template, raise_file_limit, ticker
from bench.lookup_clients import TOPICS_PER_CLIENT, LookupClients, Mark, summarize
from remoting import codes
from remoting.client import registration_request

REGISTER, HEARTBEAT = "register", "heartbeat"
PERIOD_S = 30.0  # registerNameServerPeriod
CLUSTER_INFO_PERIOD_S = 5.0  # a 5.x broker's refreshMetadata
FIRST_BEAT_DELAY_S = 10.0  # the register timer's initial delay after `start`'s own registration
FAILURES_KEPT = 20  # refusals kept as examples (a saturated side refuses millions)
REGISTER_TIMEOUT_S = 24.0  # registerBrokerTimeoutMills: how long a broker waits for an answer
BROKERS_PER_CLIENT = 10
MAX_CONNECTIONS = 15_000  # of 20,000 files a process may open here (see the module's docstring)
# A broker connection's kernel send buffer (SO_SNDBUF, doubled by the kernel). What a broker sends a
# NameServer that does not read it waits on the broker's own host; here the fleet shares the host
# with the side under test, and autotuned (up to 4 MiB a connection on loopback) its 15,000
# connections' unsent registrations would fill the host's TCP memory, which both share ('TCP: out
# of memory' and a reset of Spark's local socket, 2026-11-29). The rest waits in the fleet's process.
SEND_BUFFER_BYTES = 16 * 1024
CLUSTER = "VsCluster"


def system_topics(cluster: str, broker: str) -> dict[str, dict[str, int]]:
    """The topics `TopicConfigManager.init` (5.3.3) puts in a default broker's table (and the
    timer store's `rmq_sys_wheel_timer`): read queues, write queues, perm."""
    def tc(queues: int, perm: int = 6) -> dict[str, int]:
        return {"readQueueNums": queues, "writeQueueNums": queues, "perm": perm}
    return {"SELF_TEST_TOPIC": tc(1), "TBW102": tc(8, 7), "BenchmarkTest": tc(1024), cluster: tc(16, 7),
            broker: tc(1, 7), "OFFSET_MOVED_EVENT": tc(1), "SCHEDULE_TOPIC_XXXX": tc(18),
            f"{cluster}_REPLY_TOPIC": tc(1), f"rmq_sys_REVIVE_LOG_{cluster}": tc(8),
            f"rmq_sys_SYNC_BROKER_MEMBER_{broker}": tc(1, 1), "RMQ_SYS_TRANS_HALF_TOPIC": tc(1),
            "RMQ_SYS_TRANS_OP_HALF_TOPIC": tc(1), "rmq_sys_wheel_timer": tc(1)}


def broker_addr(g: int) -> str:
    return f"10.{20 + g // 62500}.{g // 250 % 250}.{g % 250}:10911"


def broker_name(g: int) -> str:
    return f"vs-{g}"


def user_topic(g: int, i: int) -> str:
    return f"VsTopic-{g}-{i}"


def registration(g: int, topics: int, started_ms: int) -> tuple[dict[str, str], bytes]:
    """Broker g's REGISTER_BROKER: its system topics and `topics` of its own, 4 queues each."""
    table: dict[str, dict[str, Any]] = dict(system_topics(CLUSTER, broker_name(g)))
    table.update({user_topic(g, i): {"readQueueNums": 4, "writeQueueNums": 4} for i in range(topics)})
    return registration_request(cluster=CLUSTER, broker_name=broker_name(g), broker_id=0, addr=broker_addr(g),
                                ha_addr=broker_addr(g)[:-1] + "2", topics=table,
                                data_version={"timestamp": started_ms + g, "counter": 1, "stateVersion": 0})


@dataclass
class Stats:
    """What the fleet sent and was answered; read by the bench's thread (ints and lists under the GIL)."""

    sent: int = 0  # liveness signals (re-registrations or 904s) sent since the first wave
    answered: int = 0
    skipped: int = 0  # a broker's timer fired while its last registration was unanswered
    refused_busy: int = 0
    failures: list[str] = field(default_factory=list)  # the first FAILURES_KEPT, as examples
    failed: int = 0  # every refusal but SYSTEM_BUSY, and every send on a closed connection
    signals_refused_busy: int = 0  # re-registrations answered SYSTEM_BUSY (a broker tries again next period)
    cluster_info_sent: int = 0
    cluster_info_answered: int = 0
    last_sent: dict[str, list[int]] = field(default_factory=dict)  # address -> its newest signals, epoch ms

    def fail(self, what: str) -> None:
        self.failed += 1
        if len(self.failures) < FAILURES_KEPT:
            self.failures.append(what)


class BrokerFleet:
    """`brokers` brokers with `topics` topics of their own each, against the NameServer at `addr`.
    The constructor starts the clients (`bench.lookup_clients`, their lookups timed from then on),
    connects every broker and sends every first registration at once (a fleet starting together),
    returning when all are answered (`register_s`). Each broker's register timer runs from its own
    first answer, as a broker's does (`FIRST_BEAT_DELAY_S`, then every period); `start()` starts
    the 106 timers; `mode` (REGISTER or HEARTBEAT) and `cluster_info` may be switched while they
    run."""

    def __init__(self, addr: str, brokers: int, topics: int, *, mode: str = REGISTER, period_s: float = PERIOD_S,
                 clients: bool = True, seed: int = 1, max_connections: int = MAX_CONNECTIONS,
                 wave_budget_s: float = 3600.0) -> None:
        if mode not in (REGISTER, HEARTBEAT):
            raise ValueError(f"fleet mode {mode!r}: expected {REGISTER!r} or {HEARTBEAT!r}")
        raise_file_limit()
        self.addr, self.brokers, self.topics, self.mode, self.period = addr, brokers, topics, mode, period_s
        self.cluster_info = False
        self.stats = Stats()
        self.n_clients = max(1, brokers // BROKERS_PER_CLIENT) if clients else 0
        total = brokers + self.n_clients
        self.broker_conns = max(1, min(brokers, max_connections * brokers // total))
        self.client_conns = min(self.n_clients, max_connections - self.broker_conns) if self.n_clients else 0
        rnd = random.Random(seed)
        self._phases = {kind: sorted((rnd.random(), i) for i in range(n))
                        for kind, n in (("beat", brokers), ("106", brokers))}
        started_ms = int(time.time() * 1000)
        # built before the clock starts: each broker builds its request on its own host
        self._registrations = [Template(codes.REGISTER_BROKER, *registration(g, topics, started_ms))
                               for g in range(brokers)]
        self._heartbeats = [Template(codes.BROKER_HEARTBEAT, {"clusterName": CLUSTER, "brokerAddr": broker_addr(g),
                                                               "brokerName": broker_name(g)}, oneway=True)
                            for g in range(brokers)]
        self._cluster_info = Template(codes.GET_BROKER_CLUSTER_INFO, None)
        self._opaque = 0
        self._pending: dict[int, tuple[str, int]] = {}  # opaque -> (kind, actor)
        self._in_flight: dict[int, float] = {}  # broker -> when its unanswered re-registration was sent
        # broker -> when its start ended (monotonic): its first registration answered, or given up
        # after REGISTER_TIMEOUT_S (the broker goes on; its timer starts either way)
        self._joined: dict[int, float] = {}
        self._wave_sent: dict[int, float] = {}
        self.wave_answered = 0  # first registrations answered SUCCESS (ours answers once they are served)
        self.register_s: float | None = None
        self._wave_left = 0
        self._wave_done: asyncio.Event | None = None
        self._busy: list[int] = []
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="broker-fleet")
        self._ready = threading.Event()
        self._started_timers = threading.Event()
        self._error: BaseException | None = None
        self._clients = LookupClients(addr, self.n_clients, self.client_conns, self._client_topics(), seed=seed) \
            if self.n_clients else None
        self.started = time.monotonic()
        self._thread.start()
        # False: the side did not answer every first registration within the budget; the fleet
        # goes on (each broker's timer runs from its own answer or its 24 s give-up) and the
        # bench measures the side as it is, not held
        self.wave_held = self._ready.wait(wave_budget_s) and self._error is None
        if self._error is not None:
            raise RuntimeError(f"the fleet could not register at {addr}: {self._error}") from self._error
        if self.wave_held and self.stats.failed:
            raise RuntimeError(f"{self.stats.failed} registrations refused by {addr}, "
                               f"e.g. {self.stats.failures[0]}")

    # ------------------------------------------------------------------ the bench's side
    @property
    def sent(self) -> int:
        return self.stats.sent

    @property
    def failures(self) -> list[str]:
        return self.stats.failures

    @property
    def last_sent(self) -> dict[str, list[int]]:
        return self.stats.last_sent

    @property
    def refused_busy(self) -> int:
        return self.stats.refused_busy

    def start(self) -> BrokerFleet:
        self._started_timers.set()
        return self

    def close(self) -> None:
        self._stop.set()
        self._started_timers.set()
        self._thread.join(timeout=30)
        if self._clients is not None:
            self._clients.close()

    def lookup_mark(self) -> Mark:
        """Where the clients' lookups stand now: `lookup_summary(mark)` covers those after it."""
        return self._clients.mark() if self._clients is not None else (0, 0, 0)

    def lookup_summary(self, mark: Mark = (0, 0, 0)) -> dict[str, Any]:
        """The clients' lookups since `mark` (`LookupClients.summary`)."""
        return self._clients.summary(mark) if self._clients is not None else summarize([], 0, 0, 0)

    # ------------------------------------------------------------------ the loop's side
    def _run(self) -> None:
        import uvloop
        try:
            uvloop.run(self._main())
        except BaseException as exc:  # said by the constructor (or lost once timers run: the stats say it)
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        host, _, port = self.addr.rpartition(":")
        conns: list[Conn] = []
        for _ in range(self.broker_conns):
            transport, proto = await self._loop.create_connection(lambda: Conn(self._answered, self.stats.fail),
                                                                   host, int(port))
            transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
            conns.append(proto)
        self._bconns = conns
        self._wave_done = asyncio.Event()
        self.started = time.monotonic()
        # every address is in it from the start (the bench's thread copies it while the timers run,
        # so no key is added later), with the time its first registration was sent
        sent_ms = int(time.time() * 1000)
        self.stats.last_sent.update({broker_addr(g): [sent_ms] for g in range(self.brokers)})
        # A broker's register timer runs from its own start, whatever the rest of the fleet does: a
        # broker answered early in a long wave re-registers during it, and the clients look their
        # routes up from the start (a topic not registered yet is answered TOPIC_NOT_EXIST). No
        # connection is idle for the NameServer's 120 s, as it was when they all waited for the
        # whole wave.
        tickers = [asyncio.ensure_future(ticker(self._phases["beat"], self.period, self._beat))]
        await self._first_wave(list(range(self.brokers)))
        self.register_s = time.monotonic() - self.started
        self._ready.set()
        await self._loop.run_in_executor(None, self._started_timers.wait)
        if not self._stop.is_set():
            tickers.append(asyncio.ensure_future(ticker(self._phases["106"], CLUSTER_INFO_PERIOD_S, self._ask_cluster_info)))
            await self._loop.run_in_executor(None, self._stop.wait)
        for t in tickers:
            t.cancel()
        for c in conns:
            if c.transport is not None:
                c.transport.close()
        await asyncio.sleep(0.1)

    async def _first_wave(self, brokers: list[int]) -> None:
        """Every broker's first registration at once; one refused as busy registers again a period later."""
        deadline = self.started + self.period
        while brokers:
            assert self._wave_done is not None
            self._wave_left, self._busy = len(brokers), []
            self._wave_done.clear()
            sent = time.monotonic()
            for g in brokers:
                self._wave_sent.setdefault(g, sent)
                self._send("wave", g, self._registrations[g], self._bconns[g % self.broker_conns])
            await asyncio.wait_for(self._wave_done.wait(), 3600)
            brokers = sorted(self._busy)
            if brokers:
                self.stats.refused_busy += len(brokers)
                await asyncio.sleep(max(0.0, deadline - time.monotonic()))
                deadline += self.period

    def _beat(self, g: int) -> None:
        now = time.monotonic()
        joined = self._joined.get(g)
        if joined is None and now - self._wave_sent.get(g, now) >= REGISTER_TIMEOUT_S:
            joined = self._joined[g] = self._wave_sent[g] + REGISTER_TIMEOUT_S
        if joined is None or now - joined < FIRST_BEAT_DELAY_S:
            return  # not started yet: its first registration is unanswered, or its timer's first delay runs
        conn = self._bconns[g % self.broker_conns]
        if self.mode == HEARTBEAT:
            self._send("heartbeat", g, self._heartbeats[g], conn)
        elif g in self._in_flight and now - self._in_flight[g] < REGISTER_TIMEOUT_S:
            self.stats.skipped += 1  # its previous run still waits for the answer (the timer's one thread)
            return
        else:
            self._in_flight[g] = now
            self._send("register", g, self._registrations[g], conn)
        self.stats.sent += 1
        addr = broker_addr(g)
        self.stats.last_sent[addr] = [*self.stats.last_sent.get(addr, [])[-2:], int(time.time() * 1000)]

    def _ask_cluster_info(self, g: int) -> None:
        if self.cluster_info:
            self.stats.cluster_info_sent += 1
            self._send("106", g, self._cluster_info, self._bconns[g % self.broker_conns])

    def _client_topics(self) -> list[str]:
        out = []
        for c in range(self.n_clients):
            g = (c * BROKERS_PER_CLIENT) % self.brokers
            out += [user_topic(g, i % max(1, self.topics)) for i in range(TOPICS_PER_CLIENT)] if self.topics \
                else [broker_name(g)] * TOPICS_PER_CLIENT
        return out

    def _send(self, kind: str, actor: int, template: Template, conn: Conn) -> None:
        self._opaque += 1
        opaque = self._opaque
        oneway = kind == "heartbeat"
        if not oneway:
            self._pending[opaque] = (kind, actor)
        if not conn.send(template.frame(opaque)):
            self._pending.pop(opaque, None)
            if kind in ("register", "wave"):
                self._in_flight.pop(actor, None)
            self.stats.fail(f"{kind} of {actor}: the connection is closed")

    def _answered(self, opaque: int, code: int) -> None:
        entry = self._pending.pop(opaque, None)
        if entry is None:
            return
        kind, actor = entry
        if kind == "wave":
            if code == codes.SYSTEM_BUSY:
                self._busy.append(actor)
            elif code != codes.SUCCESS:
                self.stats.fail(f"first registration of {actor}: code {code}")
            else:
                self.wave_answered += 1
            self._joined.setdefault(actor, time.monotonic())  # start() goes on whatever the answer
            self._wave_left -= 1
            if self._wave_left == 0 and self._wave_done is not None:
                self._wave_done.set()
        elif kind == "register":
            self._in_flight.pop(actor, None)
            if code == codes.SUCCESS:
                self.stats.answered += 1
            elif code == codes.SYSTEM_BUSY:  # flow control: the broker logs it and registers next period
                self.stats.signals_refused_busy += 1
            else:
                self.stats.fail(f"re-registration of {actor}: code {code}")
        elif kind == "106":
            self.stats.cluster_info_answered += code == codes.SUCCESS

