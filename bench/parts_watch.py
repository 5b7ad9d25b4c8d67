"""The watch part: 10,000 open watch streams on one HTTP server (`python -m serving`), what they
cost while nothing changes, and how soon a served cut reaches them.

The warehouse is written by the real sink without Spark (`WatchedFleet`: 1,000 broker groups × 10
topics, a group's rows from the pure step), so each change is one cut the bench commits itself,
at a known time. The server runs standalone (its own in-process cut builder), so a cut is served
right after its file is written: the file's mtime is when the cut was served, within a
millisecond, and each event's latency is its arrival at a watcher minus that. The watchers are
one process of sockets on an asyncio loop (`python -m bench.parts_watch --client`, uvloop), 10 per
topic over the 100 first groups' topics, which records when each event arrived: the kernel's
receive time of its packet (SO_TIMESTAMPNS), not when that process got round to reading it.

Figures: the server's CPU over a quiet window with the watchers open against the same window
with none (its refresher and keep-alive comments included); a change to one group (its 10 topics:
100 watchers) and a change to all 100 watched groups in one cut (every watcher), each as
served → event at the watchers (p50, p99, max) and as committed → event.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

from bench.cut_sharing import memory
from bench.probes import addr, percentile
from bench.report import ROOT, Report
from bench.system import cpu_seconds
from ops.net import free_port
from ops.procs import stop_group

GROUPS, TOPICS = 1_000, 10
WATCHED_GROUPS = 100  # their 1,000 topics are watched
WATCHERS = 10_000
CLUSTER = "BenchCluster"


class WatchedFleet:
    """A warehouse of GROUPS groups × TOPICS topics, written batch by batch by the real sink, each
    group's state kept so that later changes are cuts of the same history."""

    def __init__(self, root: Path) -> None:
        from bench.pure import CFG
        from pipelines.sink import DeltaSink
        self.cfg = CFG
        self.sink = DeltaSink(root / "delta", retention_ms=7 * 86_400_000, maintenance_interval_ms=10**12)
        self.sink.ensure_tables()
        self.states: dict[int, Any] = {}
        self.offset = 0
        self.batch = 0

    def register(self, members: list[tuple[int, int]]) -> float:
        """Broker (group, id) pairs (re-)registering with their group's topics, as one cut; returns
        when the commit ended (time.time())."""
        from pipelines.step import run_group
        from schemas import events as ev
        now = int(time.time() * 1000)
        rows: list[dict[str, Any]] = []
        by_group: dict[int, list[dict[str, Any]]] = {}
        for g, bid in members:
            names = [f"WatchTopic-{g}-{i}" for i in range(TOPICS)]
            e = ev.register_broker_event(cluster=CLUSTER, broker_name=f"watch-{g}", broker_id=bid, addr=addr(g, bid),
                                         topics={n: ev.topic_config(n, read=4, write=4) for n in names})
            key, value = ev.encode(e)
            by_group.setdefault(g, []).append({"partition": 0, "offset": self.offset, "timestamp": now,
                                               "key": key.decode(), "value": value})
            self.offset += 1
        for g, records in by_group.items():
            self.states[g], _, out = run_group(f"watch-{g}", records, self.states.get(g), now, self.cfg)
            rows.extend(r for r in out if r["target"] != "route_changes")
        self.sink.commit(self.batch, rows, {"0": self.offset}, len(members))
        self.batch += 1
        return time.time()


def watched_paths() -> list[str]:
    topics = [f"WatchTopic-{g}-{i}" for g in range(WATCHED_GROUPS) for i in range(TOPICS)]
    return [f"/topics/{topics[w % len(topics)]}/route/watch" for w in range(WATCHERS)]


# ---------------------------------------------------------------- the watchers' process


SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux: the kernel stamps each packet on arrival


class _Watcher:
    """One stream on a plain non-blocking socket: records (cut id, arrival) of each event after
    the first, the arrival being the kernel's receive time of the packet that completed it
    (SO_TIMESTAMPNS), so the watchers' own process, reading 10,000 sockets in turn, adds nothing."""

    ID = re.compile(rb"(?:^|\n)id: (\d+)\n")

    def __init__(self, path: str, port: int, arrivals: list[tuple[int, float]], first: asyncio.Future[None]) -> None:
        self.path, self.arrivals, self.first = path, arrivals, first
        self.opened = False
        self.pending = b""
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n".encode())
        self.sock.setblocking(False)

    def readable(self) -> None:
        try:
            data, ancillary, _, _ = self.sock.recvmsg(1 << 16, socket.CMSG_SPACE(16))
        except BlockingIOError:
            return
        if not data:
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
            if not self.first.done():
                self.first.set_exception(ConnectionError(f"{self.path}: closed before its first event"))
            return
        at = time.time()
        for level, kind, stamp in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(stamp) >= 16:
                seconds, nanos = struct.unpack("qq", stamp[:16])
                at = seconds + nanos / 1e9
        complete, _, self.pending = (self.pending + data).rpartition(b"\n\n")
        for m in self.ID.finditer(complete):
            if not self.opened:
                self.opened = True
                if not self.first.done():
                    self.first.set_result(None)
            else:
                self.arrivals.append((int(m.group(1)), at))


async def _watch_all(port: int) -> None:
    """Open every stream, say "open <seconds>" once each has its first event, then on each "report"
    line print the arrivals recorded since the last report; ends at EOF."""
    loop = asyncio.get_running_loop()
    arrivals: list[tuple[int, float]] = []
    began = time.monotonic()
    firsts = []
    watchers = []
    for i, path in enumerate(watched_paths()):
        first: asyncio.Future[None] = loop.create_future()
        firsts.append(first)
        w = _Watcher(path, port, arrivals, first)
        watchers.append(w)
        loop.add_reader(w.sock.fileno(), w.readable)
        if i % 500 == 499:
            await asyncio.sleep(0.05)  # within the server's accept backlog
    await asyncio.gather(*firsts)
    print(f"open {time.monotonic() - began:.2f}", flush=True)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while (line := await reader.readline()):
        if line.strip() == b"report":
            taken, arrivals[:] = list(arrivals), []
            print(json.dumps(taken), flush=True)


def client_main(port: int) -> None:
    import uvloop
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    uvloop.run(_watch_all(port))


# ---------------------------------------------------------------- the part


def _pids(proc: subprocess.Popen[str]) -> list[int]:
    """The server's processes: granian's main and its worker."""
    out = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
    return [proc.pid, *map(int, out)]


def _served_at(url: str, cut_file: Path, after: int, timeout_s: float = 60) -> tuple[int, float]:
    """The id of the first cut newer than `after` the server serves, and when it was served: the
    mtime of the cut file holding it (the standalone server maps the file right after writing it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            served = requests.get(url + "/healthz", timeout=10).json()["snapshotId"]
        except requests.RequestException:  # not listening yet
            served = None
        if served is not None and served > after:
            return served, cut_file.stat().st_mtime_ns / 1e9
        time.sleep(0.02)
    raise RuntimeError(f"the server served no cut after {after} within {timeout_s:.0f} s")


def _line(proc: subprocess.Popen[str], timeout_s: float) -> str:
    """The watchers' process's next line, or RuntimeError after `timeout_s` (or if it ended)."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    line = proc.stdout.readline() if ready else ""
    if not line:
        raise RuntimeError(f"the watchers' process said nothing within {timeout_s:.0f} s (exit {proc.poll()})")
    return line


def _latency(arrivals: list[tuple[int, float]], cut: int, since: float) -> dict[str, Any]:
    times = [at - since for cid, at in arrivals if cid == cut]
    if not times:
        return {"events": 0}
    return {"events": len(times), "min_ms": 1000 * min(times), "p50_ms": 1000 * percentile(times, 50),
            "p99_ms": 1000 * percentile(times, 99), "max_ms": 1000 * max(times)}


def measure(quick: bool) -> dict[str, Any]:
    """Start a server over a fresh warehouse, open the watchers, measure; every process stopped after."""
    root = Path(tempfile.mkdtemp(prefix="bench-watch-"))
    fleet = WatchedFleet(root)
    for start in range(0, GROUPS, 100):
        fleet.register([(g, 0) for g in range(start, min(GROUPS, start + 100))])
    port = free_port()
    env = {**os.environ, "NAMESRV_DATA_DIR": str(root), "NAMESRV_HTTP_PORT": str(port),
           "NAMESRV_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}", "NAMESRV_HTTP_MAX_WATCHERS": str(WATCHERS + 100)}
    url = f"http://127.0.0.1:{port}"
    idle_s = 15.0 if quick else 30.0
    log = (root / "server.log").open("w")
    server = subprocess.Popen([sys.executable, "-m", "serving"], cwd=ROOT, env=env, stdout=log,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    client: subprocess.Popen[str] | None = None
    out: dict[str, Any] = {"watchers": WATCHERS, "topics_watched": WATCHED_GROUPS * TOPICS, "idle_s": idle_s}
    try:
        served, _ = _served_at(url, root / "cuts" / "current.cut", -1, 120)
        time.sleep(3)  # past its start
        pids = _pids(server)
        c0, w0 = cpu_seconds(pids, children=False), time.monotonic()
        time.sleep(idle_s)
        out["idle_cores_without"] = (cpu_seconds(pids, children=False) - c0) / (time.monotonic() - w0)
        worker = pids[-1]
        out["worker_mib_without"] = memory(worker)
        client = subprocess.Popen([sys.executable, "-m", "bench.parts_watch", "--client", str(port)], cwd=ROOT,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
        assert client.stdout is not None and client.stdin is not None
        opened = _line(client, 300)
        if not opened.startswith("open "):
            raise RuntimeError(f"the watchers did not open: {opened!r}")
        out["open_s"] = float(opened.split()[1])
        time.sleep(3)
        c0, k0, w0 = cpu_seconds(pids, children=False), cpu_seconds([client.pid], children=False), time.monotonic()
        time.sleep(idle_s)
        spent = time.monotonic() - w0
        out["idle_cores_with"] = (cpu_seconds(pids, children=False) - c0) / spent
        out["client_idle_cores"] = (cpu_seconds([client.pid], children=False) - k0) / spent
        out["worker_mib_with"] = memory(worker)

        def change(members: list[tuple[int, int]], label: str) -> None:
            nonlocal served
            assert client is not None and client.stdin is not None and client.stdout is not None
            committed = fleet.register(members)
            served, served_at = _served_at(url, root / "cuts" / "current.cut", served)
            time.sleep(2)
            client.stdin.write("report\n")
            client.stdin.flush()
            arrivals = [(int(c), float(t)) for c, t in json.loads(_line(client, 120))]
            out[label] = {"cut": served, "served": _latency(arrivals, served, served_at),
                          "committed": _latency(arrivals, served, committed),
                          "served_after_commit_ms": 1000 * (served_at - committed)}

        change([(0, 1)], "one_group")  # a slave joins group 0: its 10 topics, 100 watchers
        change([(g, 1) for g in range(1, WATCHED_GROUPS)] + [(0, 2)], "all_groups")  # every watcher at once
    finally:
        for proc in (client, server):
            if proc is not None:
                stop_group(proc, 30)
        log.close()
        out["server_log"] = [line for line in (root / "server.log").read_text().splitlines()
                             if "watch:" in line or "WARNING" in line or "ERROR" in line]
        shutil.rmtree(root, ignore_errors=True)
    return out


def watch_benchmark(rep: Report, quick: bool) -> None:
    r = measure(quick)
    rep.raw["watch"] = r
    idle = 100 * r["idle_cores_with"]
    rep.target(f"{WATCHERS:,} open watch streams, nothing changing: CPU of the HTTP server", "≤ 5 % of a core",
               f"{idle:.2f} % of a core ({100 * r['idle_cores_without']:.2f} % with none open; keep-alive comments "
               f"included), {r['worker_mib_with']['pss'] - r['worker_mib_without']['pss']:.0f} MiB more PSS; "
               f"opened in {r['open_s']:.1f} s", idle <= 5)
    one, every = r["one_group"]["served"], r["all_groups"]["served"]
    rep.target(f"a route change, cut served → event at its watchers ({WATCHERS:,} open; one group's topics "
               f"changed: {WATCHERS // WATCHED_GROUPS} watchers)", "≤ 100 ms",
               f"p50 {one['p50_ms']:.1f}, p99 {one['p99_ms']:.1f}, max {one['max_ms']:.1f} ms",
               one["events"] == WATCHERS // WATCHED_GROUPS and one["max_ms"] <= 100)
    rep.target(f"every watched route changed in one cut: served → event at all {WATCHERS:,} watchers", "≤ 100 ms",
               f"{every['events']:,} reached: p50 {every['p50_ms']:.1f}, p99 {every['p99_ms']:.1f}, "
               f"max {every['max_ms']:.1f} ms", every["events"] == WATCHERS and every["max_ms"] <= 100)
    rep.section("Watch streams", [
        f"{WATCHERS:,} watchers ({WATCHERS // (WATCHED_GROUPS * TOPICS)} per topic over {WATCHED_GROUPS * TOPICS:,} topics "
        f"of {GROUPS:,} groups × {TOPICS}) on one `python -m serving` (granian's event loop; the cut builder in the "
        "server), the watchers one asyncio process beside it. Latency is each event's arrival at its watcher (the "
        "kernel's receive time of its packet) minus when its cut was served (the cut file's mtime: the standalone "
        "server maps the file as it writes it, so this includes the mapping), and "
        "minus when the bench's commit of the cut ended (the server's refresher notices a new cut within 20-100 ms "
        "and loads it from Delta).", "",
        "| | watchers reached | served → event p50 / p99 / max | committed → event p50 / p99 / max |", "|---|---|---|---|",
        *[f"| {label} | {r[key]['served']['events']:,} | {r[key]['served']['p50_ms']:.1f} / "
          f"{r[key]['served']['p99_ms']:.1f} / {r[key]['served']['max_ms']:.1f} ms | "
          f"{r[key]['committed']['p50_ms']:.0f} / {r[key]['committed']['p99_ms']:.0f} / "
          f"{r[key]['committed']['max_ms']:.0f} ms |"
          for key, label in (("one_group", "a slave joins one group (its 10 topics)"),
                             ("all_groups", f"a slave joins each of the {WATCHED_GROUPS} watched groups, one cut"))],
        "", f"Quiet window of {r['idle_s']:.0f} s: the server used {100 * r['idle_cores_with']:.2f} % of a core with the "
        f"watchers open, {100 * r['idle_cores_without']:.2f} % with none; the watchers' process "
        f"{100 * r['client_idle_cores']:.2f} %. The server's worker: PSS {r['worker_mib_without']['pss']:.0f} MiB "
        f"without watchers, {r['worker_mib_with']['pss']:.0f} MiB with them."])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--client", type=int, metavar="PORT", help="be the watchers' process against this port")
    ap.add_argument("--quick", action="store_true", help="shorter quiet windows")
    args = ap.parse_args(argv)
    if args.client:
        client_main(args.client)
        return 0
    print(json.dumps(measure(quick=args.quick), indent=1))  # the part alone, without writing BENCHMARKS.md
    return 0


if __name__ == "__main__":
    sys.exit(main())
