"""Parts side by side with peers in one run: the remoting front against RocketMQ's NameServers
(remoting), and the whole system against RocketMQ's NameServer under one fleet (versus, fleet)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.report import LARGE_FLEET, Report
from bench.system import System, cpu_seconds
from remoting.client import RemotingClient

# How long ours may take to answer a fleet's first registrations before the size is saved as not
# held (bench/fleet.not_held): 15 minutes is 30 of the fleet's periods, and a wave not answered by
# then is not converging (100,000 brokers on 2 cores: about 25,000 served after 13 minutes).
WAVE_BUDGET_S = 900.0
PACE_US = 7000  # 64 connections pausing 7 ms after each answer: about 8,000 lookups/s, as the HTTP target


def remoting_benchmark(rep: Report, quick: bool) -> None:
    """Route lookups (code 105) over RocketMQ's protocol, 64 connections, the same Java load
    generator against our remoting front and RocketMQ's own NameServer holding the same routes."""
    import json as _json

    from ops import rocketmq_software as rmq
    from ops import rust_namesrv
    from ops.procs import processes, tree
    from remoting import codes
    from remoting.client import RemotingClient
    brokers, per_broker = 10, 10
    seconds, warmup = (10, 3) if quick else (30, 5)
    topics = [f"BenchTopic-{i}" for i in range(brokers * per_broker)]

    def register_all(addr: str) -> list[RemotingClient]:
        conns = []
        for b in range(brokers):
            table = {t: {"readQueueNums": 8, "writeQueueNums": 8} for t in topics[b * per_broker:(b + 1) * per_broker]}
            c = RemotingClient(addr)  # kept open: closing a broker's connection unregisters it
            answer = c.register_broker(cluster="BenchCluster", broker_name=f"bench-{b}", broker_id=0,
                                       addr=f"127.0.0.1:{41000 + b}", ha_addr=f"127.0.0.1:{42000 + b}", topics=table)
            assert answer.code == codes.SUCCESS, answer.remark
            conns.append(c)
        with RemotingClient(addr) as c:
            deadline = time.monotonic() + 60
            while c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topics[-1]}).code != codes.SUCCESS:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"routes not served by {addr}")
                time.sleep(0.2)
        return conns

    def load(addr: str, pause_us: int = 0) -> dict[str, Any]:
        out = rmq.run_client("RouteLoad", addr, ",".join(topics), "64", str(warmup), str(seconds), str(pause_us),
                             timeout_s=seconds + warmup + 60)
        if out.returncode != 0:
            raise RuntimeError(out.stdout + out.stderr[-2000:])
        result: dict[str, Any] = _json.loads(out.stdout.strip().splitlines()[-1])
        return result

    def rss_mib(pid: int) -> float:
        return next((p.rss_kib for p in processes() if p.pid == pid), 0) / 1024

    with System() as s:
        ours_addr = f"127.0.0.1:{s.cfg.remoting_port}"
        conns = register_all(ours_addr)
        front = next(p for p in processes() if p.role == "remoting" and p.ppid == s.launcher.pid)  # type: ignore[union-attr]
        # with NAMESRV_REMOTING_PROCESSES > 1 `front` is the supervisor of the front processes:
        # count them all (with one, this is the front alone, as before)
        fronts = [p.pid for p in tree(front.pid)]
        c0 = cpu_seconds(fronts, children=False)
        ours = load(ours_addr)
        front_cpu = cpu_seconds(fronts, children=False) - c0
        # the load runs through warm-up and measurement at about the measured rate; the client's
        # own start (a JVM) is in the wall time but costs the front nothing
        rep.raw["remoting_lookups_per_core_s"] = ours["rps"] * (seconds + warmup) / max(front_cpu, 1e-6)
        ours["rss_mib"] = sum(rss_mib(pid) for pid in fronts)
        ours_paced = load(ours_addr, PACE_US)
        for c in conns:
            c.close()
    def peer(process: rmq.JavaProcess) -> tuple[dict[str, Any], dict[str, Any]]:
        try:
            conns = register_all(process.addr)
            saturated = load(process.addr)
            saturated["rss_mib"] = rss_mib(process.proc.pid)
            paced = load(process.addr, PACE_US)
            for c in conns:
                c.close()
        finally:
            process.cleanup()
        return saturated, paced

    # peers: (column, saturated, paced); rocketmq-rust's when it builds here, else why not
    peers = [("RocketMQ NameServer (Java 5.3.3)", *peer(rmq.start_namesrv_as_shipped()))]
    binary = rust_namesrv.ensure()
    if isinstance(binary, Path):
        peers.append((f"rocketmq-rust {rust_namesrv.VERSION}", *peer(rust_namesrv.start(binary))))
    rust_note = "" if isinstance(binary, Path) else f" rocketmq-rust's NameServer is not in this run: {binary}."
    rep.raw["remoting"] = {"ours": ours, "ours_paced": ours_paced,
                           **{name: {"saturated": sat, "paced": paced} for name, sat, paced in peers}}
    best_name, best, _ = max(peers, key=lambda p: p[1]["rps"])
    ratio = ours["rps"] / max(best["rps"], 1)
    rep.target("route lookups over remoting (code 105), 64 connections, vs the best peer",
               "≥ the best peer's lookups/s (RocketMQ's Java NameServer, rocketmq-rust's), p99 ≤ 5 ms",
               f"saturated: ours {ours['rps']:,.0f}/s (p99 {ours['p99_us'] / 1000:.2f} ms); "
               + "; ".join(f"{n} {s['rps']:,.0f}/s (p99 {s['p99_us'] / 1000:.2f} ms)" for n, s, _ in peers)
               + f": ratio to the best ({best_name}) {ratio:.2f}; paced ({PACE_US / 1000:.0f} ms pause per "
               f"connection): ours p99 {ours_paced['p99_us'] / 1000:.2f} ms; front RSS {ours['rss_mib']:.0f} MiB"
               + rust_note
               + ("" if ratio >= 1 and ours_paced["p99_us"] <= 5000 else
                  f". Profile: the front took {front_cpu / (seconds + warmup):.2f} of a core "
                  f"({rep.raw['remoting_lookups_per_core_s']:,.0f} lookups per front core-second), its one "
                  "interpreter the bound while the load generator takes the other core. Next: "
                  "NAMESRV_REMOTING_PROCESSES=N fronts on a host with cores to spare (docs/performance.md)"),
               ratio >= 1 and ours_paced["p99_us"] <= 5000)
    cols = [("ours (remoting front)", ours, ours_paced), *peers]

    def row(label: str, cell: Callable[[dict[str, Any], dict[str, Any]], str]) -> str:
        return f"| {label} | " + " | ".join(cell(s, p) for _, s, p in cols) + " |"

    rep.section("Remoting side by side with RocketMQ's NameServers", [
        f"The same load generator (`jvm/rocketmq/programs/RouteLoad.java`: 64 connections, one request in flight "
        f"each, JSON headers as a 5.3.3 client writes them, {warmup} s warm-up, {seconds} s measured) asks for the "
        f"routes of {len(topics)} topics ({brokers} brokers registered over remoting on each side) from our remoting "
        "front (part of the running system: the embedded Kafka, job, HTTP server beside it), from RocketMQ 5.3.3's "
        "NameServer (NamesrvStartup from the same jars, with `bin/runserver.sh`'s JVM options and its default pools) "
        "and from rocketmq-rust's NameServer "
        f"(crates.io `rocketmq-namesrv` {rust_namesrv.VERSION}, built by `ops/rust_namesrv.py`, default settings), "
        f"one after the other in this run.{rust_note}", "",
        "| | " + " | ".join(name for name, _, _ in cols) + " |", "|---|" + "---|" * len(cols),
        row("lookups/s", lambda s, p: f"{s['rps']:,.0f}"),
        row("ratio ours / this", lambda s, p: f"{ours['rps'] / max(s['rps'], 1):.2f}"),
        row("p50 / p99", lambda s, p: f"{s['p50_us'] / 1000:.2f} / {s['p99_us'] / 1000:.2f} ms"),
        row("errors", lambda s, p: str(s["errors"])),
        row(f"paced ({PACE_US / 1000:.0f} ms pause after each answer, per connection): lookups/s",
            lambda s, p: f"{p['rps']:,.0f}"),
        row("paced: p50 / p99", lambda s, p: f"{p['p50_us'] / 1000:.2f} / {p['p99_us'] / 1000:.2f} ms"),
        row("RSS of the serving process", lambda s, p: f"{s['rss_mib']:.0f} MiB")])


def versus_benchmark(rep: Report, quick: bool, sizes: tuple[int, ...] = ()) -> None:
    """Our system and RocketMQ's NameServer under the same fleet (bench/versus.py), one after the other."""
    from bench import broker_fleet, versus
    from ops import rocketmq_software as rmq
    from ops.procs import tree
    sizes, topics = sizes or ((200, 1000) if quick else (1000, 10_000)), 100
    seconds, probes = (20, 5) if quick else (60, 10)
    results: dict[str, dict[int, dict[str, Any]]] = {"ours": {}, "rocketmq": {}}

    def measure(addr: str, n: int, pids: Callable[[], list[int]],
                lag: Callable[[], float] | None = None) -> dict[str, Any]:
        fleet = broker_fleet.BrokerFleet(addr, n, topics, mode=broker_fleet.HEARTBEAT)
        try:
            with RemotingClient(addr) as reader:  # the last broker's routes answered: all registered
                versus.wait_route(reader, broker_fleet.user_topic(n - 1, topics - 1), present=True, timeout_s=900)
            registered_s = fleet.register_s
            fleet.start()
            time.sleep(min(30.0, seconds / 2))  # the heartbeats' steady state
            out: dict[str, Any] = {"register_s": registered_s, **versus.cost(pids, seconds)}
            if lag is not None:
                out["lag_s"] = lag()
            out["fresh"] = versus.freshness(addr, probes, {})
            out["expiry"] = versus.expiry(addr, probes, {})
            print(f"   {n} brokers: {out}", flush=True)
            return out
        finally:
            fleet.close()

    for n in sizes:
        with System() as s:
            results["ours"][n] = measure(f"127.0.0.1:{s.cfg.remoting_port}", n,
                                         lambda: [p.pid for p in tree(s.launcher.pid)],  # type: ignore[union-attr]
                                         s.served_lag_s)
        java_ns = rmq.start_namesrv_as_shipped()
        try:
            results["rocketmq"][n] = measure(java_ns.addr, n, lambda: [java_ns.proc.pid])  # noqa: B023
        finally:
            java_ns.cleanup()
    rep.raw["versus"] = results
    lines = [
        "The same driver (`bench/broker_fleet.py`) registers N brokers over RocketMQ's protocol (100 topics each and a "
        "default broker's 13 system topics, each broker on its own connection), lets them heartbeat (904, one-way) "
        "every 30 s, each on its own timer, with a client for every 10 brokers looking up 10 topics every 30 s, and "
        "measures "
        f"for {seconds} s: CPU and RSS of everything each side runs (ours: the embedded Kafka, the job's JVM and Python workers, "
        "the HTTP server, the remoting front, the launcher; RocketMQ: NamesrvStartup as `bin/runserver.sh` starts it: "
        "4 GiB heap, G1, full JIT, default pools); then "
        f"{probes} registrations of a new topic until its route is answered, and {probes} brokers with "
        "heartbeatTimeoutMillis 10 s from their last heartbeat until their route is gone. One side after the "
        "other, in this run, on this machine.", "",
        "| brokers | | ours | RocketMQ NameServer | ratio ours/RocketMQ |", "|---|---|---|---|---|"]
    for n in sizes:
        o, j = results["ours"][n], results["rocketmq"][n]
        for label, a, b, fmt in (
                ("CPU, % of a core", o["cpu_pct"], j["cpu_pct"], "{:.1f}"),
                ("RSS summed over processes, MiB", o["rss_mib"], j["rss_mib"], "{:.0f}"),
                ("PSS summed (shared pages once), MiB", o.get("pss_mib"), j.get("pss_mib"), "{:.0f}"),
                ("registering all, s", o["register_s"], j["register_s"], "{:.1f}"),
                ("registration → route answered, p50 / max s", o["fresh"]["p50_s"], j["fresh"]["p50_s"], "{:.3f}"),
                ("last heartbeat → route gone (10 s timeout), p50 s", o["expiry"]["p50_s"], j["expiry"]["p50_s"],
                 "{:.1f}")):
            if "PSS" in label and a is None:  # a run from before PSS was measured
                continue
            ratio = f"{a / b:.2f}" if a is not None and b else "–"
            lines.append(f"| {n:,} | {label} | {_shown(o, a, label, fmt)} | {_shown(j, b, label, fmt)} | {ratio} |")
        if o.get("lag_s") is not None:
            lines.append(f"| {n:,} | oldest event not yet served, at the end of the cost window, s | "
                         f"{o['lag_s']:.1f} | – (answers at once) | |")
    rep.section("Side by side with RocketMQ's NameServer under one fleet", lines)
    big = sizes[-1]
    o, j = results["ours"][big], results["rocketmq"][big]
    rep.target(f"{big:,} brokers × 100 topics, 30 s heartbeats, vs RocketMQ's NameServer (CPU, RSS, freshness, expiry)",
               "measured side by side (no target set)",
               f"CPU {o['cpu_pct']:.1f} vs {j['cpu_pct']:.1f} % of a core, RSS {o['rss_mib']:.0f} vs {j['rss_mib']:.0f} MiB"
               + (f" (PSS {o['pss_mib']:.0f} vs {j['pss_mib']:.0f})" if o.get("pss_mib") else "") + ", "
               f"route answered {_s(o['fresh']['p50_s'], 2)} vs {_s(j['fresh']['p50_s'], 3)} s, gone after "
               f"{_s(o['expiry']['p50_s'], 1)} vs {_s(j['expiry']['p50_s'], 1)} s", None)


def fleet_benchmark(rep: Report, quick: bool, sizes: tuple[int, ...] = ()) -> None:
    """A default-configured fleet (re-registrations every 30 s, 106 every 5 s, then 904s), ours and
    RocketMQ's NameServer one after the other (bench/fleet.py)."""
    from bench import fleet
    from bench.fleet_report import fleet_report
    from ops import rocketmq_software as rmq
    from ops.procs import tree
    sizes = sizes or ((200,) if quick else (1000,))
    seconds = 20 if quick else 60
    # Sizes not measured now keep the last run's figures (each carries when it was measured), so a
    # long size can be run on its own; every size is saved as soon as it is measured.
    kept = rep.raw.get("fleet", {}) if rep.raw.get("fleet", {}).get("seconds") == seconds else {}
    results: dict[str, dict[int, dict[str, Any]]] = {
        side: {int(n): v for n, v in kept.get(side, {}).items() if int(n) not in sizes}
        for side in ("ours", "rocketmq")}
    for n in sizes:
        topics = fleet_topics(n)
        settings = LARGE_FLEET if n >= 100_000 else {}
        with System(via_run_sh=False, **settings) as s:
            results["ours"][n] = fleet.measure_side(
                f"127.0.0.1:{s.cfg.remoting_port}", n, topics, seconds,
                lambda: [p.pid for p in tree(s.launcher.pid)],  # type: ignore[union-attr]
                lambda: {p.pid: p.role for p in tree(s.launcher.pid)},  # type: ignore[union-attr]
                lambda: fleet.served_live(s.url), wave_budget_s=WAVE_BUDGET_S)
        unpaired = rep.raw.setdefault("fleet_unpaired", {})
        unpaired[str(n)] = {**results["ours"][n], "measured": time.time()}
        rep.save()  # ours is kept (last-run.json) if RocketMQ's side then fails
        java_ns = rmq.start_namesrv_as_shipped()
        try:
            results["rocketmq"][n] = fleet.measure_side(java_ns.addr, n, topics, seconds,
                                                        lambda: [java_ns.proc.pid])  # noqa: B023
        finally:
            java_ns.cleanup()
        unpaired.pop(str(n), None)
        for side in results.values():
            side[n].update(topics=topics, measured=time.time())
        results["ours"][n]["settings"] = settings
        # keyed by the size as text, as the saved run is: the pages read it by "1000" in this run
        # too (with int keys the end of a fleet run wrote README's headline without its fleet)
        rep.raw["fleet"] = {"seconds": seconds, **{side: {str(k): v for k, v in by_size.items()}
                                                   for side, by_size in results.items()}}
        rep.save()
    fleet_report(rep, results, seconds)




def fleet_topics(brokers: int) -> int:
    """The issue's fleets: 1,000 × 10, 10,000 × 100, 100,000 × 10 (smaller fleets: 10 topics)."""
    return 100 if 1_000 < brokers <= 10_000 else 10


def _shown(side: dict[str, Any], value: float | None, label: str, fmt: str) -> str:
    """A versus cell: the figure (with the max for freshness), or why it was not reached."""
    if value is None:
        what = side["fresh"] if "answered" in label else side["expiry"]
        return f"not reached: {what.get('error', '?')}"
    extra = f" / {side['fresh']['max_s']:.3f}" if "p50 / max" in label else ""
    return fmt.format(value) + extra


def _s(value: float | None, digits: int) -> str:
    return "not reached" if value is None else f"{value:.{digits}f}"


