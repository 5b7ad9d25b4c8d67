"""The fleet's clients (`bench.broker_fleet`), in a process of their own: each client looks the
route of each of its topics up (GET_ROUTEINFO_BY_TOPIC) every `pollNameServerInterval`, at its own
phase, on its own connection, as `MQClientInstance` does, and times the answers.

Clients run on hosts apart from the brokers, so here they run apart from the brokers' loop: a
lookup timed on that loop waits for whatever the loop is doing, and a side that answers the
brokers' 106 fast kept that loop busier than one that answers them slowly, so the side that served
more was timed worse. This process holds only the clients' connections; the bench asks it over
its standard input and output, one JSON line each way (`LookupClients`), and its CPU is no side's.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO, Any

from bench.fleet_wire import Conn, Template, raise_file_limit, ticker
from remoting import codes

CLIENT_POLL_S = 30.0  # pollNameServerInterval
TOPICS_PER_CLIENT = 10
LOOKUP_TIMEOUT_S = 3.0  # MQClientAPIImpl.getTopicRouteInfoFromNameServer's timeout
START_S = 120.0  # to connect every client
Mark = tuple[int, int, int]


class LookupClients:
    """The bench's handle on the clients' process: started connected, asked for marks and
    summaries, closed by `close` (and gone with the bench's process, its standard input closing)."""

    def __init__(self, addr: str, clients: int, conns: int, topics: Sequence[str], *, seed: int = 1) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "bench.lookup_clients"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            self._ask({"addr": addr, "clients": clients, "conns": conns, "topics": list(topics), "seed": seed},
                      START_S)
        except BaseException:
            self.close()
            raise

    def mark(self) -> Mark:
        """Where the lookups stand now: `summary(mark)` covers those after it."""
        got = self._ask({"ask": "mark"})["mark"]
        return int(got[0]), int(got[1]), int(got[2])

    def summary(self, mark: Mark = (0, 0, 0)) -> dict[str, Any]:
        """The lookups since `mark`: p50/p99/max latency (ms), how many failed, and how many went
        unanswered within LOOKUP_TIMEOUT_S, a client's own timeout."""
        out: dict[str, Any] = self._ask({"ask": "summary", "mark": list(mark)})["summary"]
        return out

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._ask({"ask": "close"}, 30)
            except (OSError, RuntimeError):
                pass
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def _ask(self, what: dict[str, Any], timeout_s: float = 30.0) -> dict[str, Any]:
        stdin, stdout = self._proc.stdin, self._proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps(what) + "\n")
        stdin.flush()
        line = _readline(stdout, timeout_s)
        if not line:
            raise RuntimeError(f"the fleet's clients ended (exit {self._proc.poll()}) when asked {what.get('ask', 'to start')}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"the fleet's clients: {answer['error']}")
        return answer


def summarize(latencies: Sequence[float], sent: int, failed: int, waiting: int) -> dict[str, Any]:
    """Lookups as the bench reports them: p50/p99/max latency (ms) of those answered, how many
    failed, and how many went unanswered within LOOKUP_TIMEOUT_S (`waiting`: sent too recently
    to tell)."""
    lat = sorted(latencies)
    def q(p: float) -> float | None:
        return round(1000 * lat[min(len(lat) - 1, int(p * len(lat)))], 2) if lat else None
    late = sum(1 for x in lat if x > LOOKUP_TIMEOUT_S)
    return {"sent": sent, "p50_ms": q(0.5), "p99_ms": q(0.99), "max_ms": round(1000 * lat[-1], 2) if lat else None,
            "failed": failed, "unanswered": max(0, sent - len(lat) - failed - waiting) + late}


def _readline(stream: IO[str], timeout_s: float) -> str:
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    if reader.is_alive():
        raise RuntimeError(f"the fleet's clients did not answer within {timeout_s:.0f} s")
    return got[0]


class _Clients:
    """The clients' side, in their process: their connections, timers and what was answered."""

    def __init__(self, addr: str, clients: int, conns: int, topics: Sequence[str], seed: int) -> None:
        self.addr, self.clients, self.conns = addr, clients, max(1, conns)
        rnd = random.Random(seed)
        self._phases = sorted((rnd.random(), i) for i in range(clients))
        self._lookups = [Template(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": t}) for t in topics]
        self._opaque = 0
        self._pending: dict[int, float] = {}  # opaque -> sent (monotonic)
        self.sent = 0
        self.failed = 0
        self.latencies: list[float] = []  # answered lookups' latency, s
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="fleet-clients")
        self._thread.start()
        self._ready.wait(START_S)
        if self._error is not None or not self._ready.is_set():
            raise RuntimeError(f"could not connect {self.conns} clients to {addr}: {self._error}")

    def mark(self) -> Mark:
        return len(self.latencies), self.sent, self.failed

    def summary(self, mark: Sequence[int]) -> dict[str, Any]:
        now = time.monotonic()
        waiting = sum(1 for t in list(self._pending.values()) if now - t < LOOKUP_TIMEOUT_S)
        return summarize(self.latencies[mark[0]:], self.sent - mark[1], self.failed - mark[2], waiting)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        import uvloop
        try:
            uvloop.run(self._main())
        except BaseException as exc:  # said at the start; later, the counts say it
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        host, _, port = self.addr.rpartition(":")
        conns: list[Conn] = []
        for _ in range(self.conns):
            _, proto = await loop.create_connection(lambda: Conn(self._answered, self._lost), host, int(port))
            conns.append(proto)
        self._conns = conns
        timer = asyncio.ensure_future(ticker(self._phases, CLIENT_POLL_S, self._lookup))
        self._ready.set()
        await loop.run_in_executor(None, self._stop.wait)
        timer.cancel()
        for c in conns:
            if c.transport is not None:
                c.transport.close()
        await asyncio.sleep(0.1)

    def _lookup(self, c: int) -> None:
        conn = self._conns[c % self.conns]
        for i in range(TOPICS_PER_CLIENT):
            self.sent += 1
            self._opaque += 1
            self._pending[self._opaque] = time.monotonic()
            if not conn.send(self._lookups[(c * TOPICS_PER_CLIENT + i) % len(self._lookups)].frame(self._opaque)):
                self._pending.pop(self._opaque, None)
                self.failed += 1

    def _answered(self, opaque: int, code: int) -> None:
        sent = self._pending.pop(opaque, None)
        if sent is None:
            return
        if code in (codes.SUCCESS, codes.TOPIC_NOT_EXIST):  # answered (not registered yet during a wave)
            self.latencies.append(time.monotonic() - sent)
        else:
            self.failed += 1

    def _lost(self, what: str) -> None:
        pass  # its lookups from now on fail as they are sent (`Conn.send`)


def main() -> None:
    """Read the start line, connect, then answer each line asked until `close` or the end of input."""
    raise_file_limit()
    clients: _Clients | None = None
    for line in sys.stdin:
        asked = json.loads(line)
        if clients is None:
            try:
                clients = _Clients(asked["addr"], int(asked["clients"]), int(asked["conns"]), asked["topics"],
                                   int(asked["seed"]))
            except Exception as exc:  # said to the bench, which closes
                print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
                return
            print(json.dumps({"ready": True}), flush=True)
            continue
        try:
            if asked["ask"] == "mark":
                answer: dict[str, Any] = {"mark": clients.mark()}
            elif asked["ask"] == "summary":
                answer = {"summary": clients.summary(asked["mark"])}
            elif asked["ask"] == "close":
                clients.close()
                print(json.dumps({"closed": True}), flush=True)
                return
            else:
                answer = {"error": f"unknown ask {asked['ask']!r}"}
        except Exception as exc:
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)
    if clients is not None:
        clients.close()


if __name__ == "__main__":
    main()
