"""The fleet part's section, plot and target rows (`bench/fleet.py` measures, this renders).

The targets are the liveness issue's (35) and the serving issue's (36) for a default fleet. A
target not reached says its figure, the profile behind it (ours by process) and the next change
(`NEXT`), so a reader of BENCHMARKS.md sees where the cost sits and what is tried next without
opening another page. The next changes are ours to keep current: a re-run that moves a profile
moves what comes next, and docs/scaling.md's decision records say what each one gave.
"""

from __future__ import annotations

import time
from typing import Any

from bench.report import ROOT, Report

FLEET_PLOT = ROOT / "docs" / "fleet-cost.png"

# What comes next for a target not reached, read from its profile (docs/scaling.md, records 21-23).
NEXT = {
    "register": "no one process holds it: at 1,000 brokers (2026-11-28 14:56) the front 2.9 % of a core, the "
                "embedded Kafka 2.5, the job's JVM 2.2, the Python workers 1.6, the job 0.6, the cut builder 0.3 "
                "and the HTTP server 0.1. The serving side's timed looks at the job's progress record (a stat "
                "every 20 ms, a refresh every 200 ms in each of three processes) went the same day: the kernel "
                "wakes them when the file is replaced (18.2 -> 10.1 % of a core with the job's rarer fetches). "
                "Next: the job's cost per trigger and per batch, then the front's per-request Python",
    "heartbeat": "no one process holds it: the job's JVM 3.2 % of a core, the front 2.1, the embedded Kafka 2.0, "
                 "the Python workers 1.6, the job 0.6; about 4 of the 10 is the system with no broker (the idle "
                 "row). The target sits inside the spread between runs: on 2026-11-28 ours was 9.5 and 10.0, "
                 "RocketMQ's 3.6 and 3.0 (2.63× at 15:06, 3.33× at 18:04, nothing on this path changed between "
                 "them); its figure has been 4.8, 3.5, 3.6 and 3.0. What is left per batch is Spark's: about 0.1 s "
                 "planning and 0.2-0.3 s after the sink before the next trigger (JFR). Next: fewer batches for "
                 "deferred heartbeats, and the idle row's",
    "memory": "by hand at 10,000 × 100, a minute into re-registrations (2026-11-29): the job's JVM 557-632 MiB "
              "on the serial collector since 2026-11-29 (G1's spread over 546-991 between runs: docs/scaling.md "
              "decision 30; the class archive maps 186 MiB, the heap 223-244, code, threads and malloc the rest), "
              "Spark's Python processes 356-397, the HTTP server 215-315 (the cut file it maps, and what its "
              "lookups decode of it), the cut builder 219-225 (its own decoded copy of the cut, from Delta), the "
              "front 164, the job's driver 258-267 and the embedded Kafka 174-176. Earlier the same day the "
              "Kafka's log cleaner map (128 MiB on its heap) went, the serving processes stopped loading pandas, "
              "and Spark's Python workers and source runner give back what a batch freed. At 1,000 brokers the "
              "floor is the processes themselves (the JVM 404, Spark's four Python processes 280, the driver 181, "
              "Kafka 167, the serving processes 244). Next: the cut builder writing the cut file without its own "
              "decoded copy of the cut, and at 1,000 brokers one Python worker (80 MiB; a quarter of a second "
              "per batch, docs/scaling.md 'The task slots')",
    "idle": "the embedded Kafka's JVM 1.3 % of a core (its purgatory reapers and network threads tick on "
            "their own: 'The embedded broker'), the job's JVM 0.5-0.8 (Spark's context cleaner, a trigger every "
            "2 s; since 2026-11-29 no G1 cycle every 30 s: the serial collector at the floor's heap) and the "
            "serving side's 0.7. On 2026-11-28 the "
            "serving side's timed looks went (the kernel wakes them) and the job's watcher fetches every 2.5 s "
            "(5.88 -> 3.27 %). Next: the job's idle triggers (a look of up to 10 s when nothing waits, weighed "
            "against how long a stopping query waits for it) and a smaller embedded Kafka (fewer purgatories)",
    "first_wave": "on 2026-11-29 (f499516) 82 s in a run where RocketMQ's own wave took 13.1 s against 8.9 "
                  "s the run before, a host slower by about half for both; by hand after decision 32's "
                  "last change 41-44 s. A first registration is answered once its cut is served; since 2026-11-28 the host's cut "
                  "file is written in parts (a cut that changes no route rewrites only its head), so what is "
                  "left per cut of the wave is the job's batch and the builder's encoding of the new route "
                  "bodies (1.2-1.8 s a cut at this size, by hand): the bodies encoded for the groups a cut "
                  "changed only, and a cheaper state step for a large batch",
    "first_wave_1000": "the wave is bound by CPU: 1,000 first registrations cost the whole system about 6.5 s "
                       "of CPU over 4 s on 2 cores (by hand, 2026-11-28: the job's JVM 1.6-2.6, of it G1 "
                       "0.4-0.55, the serial collector since, and the JIT 0.25; the Python workers 1.2-1.8; "
                       "the front 1.1; the embedded Kafka 0.8; the job 0.6-0.8; the cut builder 0.4-0.8). "
                       "The front publishes them over 1.2-1.5 s "
                       "and they cross the job in two or three batches: a first one of a few records (0.9 s of "
                       "state stage on a fresh job, 0.4 s warm), then the rest (state stage 0.8-1.2 s; Spark's "
                       "event log: its two tasks ran Python for 0.4-0.5 s each). Since 2026-11-28 the step costs "
                       "0.6 ms a 23-topic registration (was 0.85) and the front encodes each once. Next: less CPU "
                       "per first registration in every process (the step runs each new registration again as "
                       "its repeat to judge it a fixed point, `repeats_nothing`: 13 % of the step), and a first "
                       "batch that does not hold the rest back (a fresh job's first execution of its stateful "
                       "stage)",
    "wave": "(2026-11-29, at a6ef526) the job and the cut builder, on two cores shared with the front. "
            "Decision 33 (docs/scaling.md) took the job's reads from failing (fetches of 64 MiB) to a "
            "job that runs through the wave: 59,331 first "
            "registrations answered in 900 s, against 6,112 on 2026-11-27. By hand the same day: the "
            "builder wrote a cut of 600,000 topics in 42 s (17.5 s of CPU), its whole topic index "
            "(133 MiB) again each time; brokers served early expired before their next registration "
            "was applied (46,000 in one batch), and were new again. The stalled brokers' connections "
            "held 1.4 GB unread in the kernel's socket buffers, the host's TCP memory ran out "
            "(dmesg: 'TCP: out of memory'), and a reset of Spark's local socket restarted the job. "
            "Since (2026-11-30, by hand, decisions 34 and 35): each front connection's kernel buffer "
            "is bounded (no 'TCP: out of memory' since, the host's TCP memory under 1 GiB), a system "
            "topic's route is built and encoded in 0.28 s instead of 1.83, and the front no longer "
            "starves the brokers' connections while clients keep it busy: 97,405 first registrations "
            "answered in 600 s, 28,344 brokers served at the end. The job is the bottleneck now: "
            "batches of 5,032 records took 41-43 s, the stateful operator's updates 55-61 s over its "
            "two tasks; a worker held the GIL about 4.4 ms a record (py-spy --gil, both cores busy) against "
            "0.93 ms of CPU through `run_bucket` on an idle core. "
            "Next: that gap (the state handed between the JVM and Python each batch, 2 MB a bucket), "
            "a cut that rewrites only the index of the groups that changed, and the front's turns "
            "while lookups wait",
    "serving_memory": "a heap profile by hand at 10,000 × 100 (2026-11-28, conf/heapdump with "
                      "NAMESRV_TRACEMALLOC): the three processes hold 277-286 MiB before any broker registers, "
                      "their imports (pyarrow's compute, dataset and parquet 52 MiB, pandas 49, flask 19, deltalake "
                      "13, where each loads them); the front holds the bodies of registrations waiting for their "
                      "cut (190 MiB at 10,000 brokers); each kept 90-200 MiB freed but not given back (given back "
                      "since 2026-11-28: the front 414 -> 244 MiB, the builder 430 -> 270 by hand; the HTTP server "
                      "restarted 648 -> 332 with the risk history's narrower reads). Since this run a registration waiting for "
                      "its cut holds about 4 KB, not its 64 KB body and event (the front's peak in a 10,000 × 100 "
                      "wave 428 -> 373 MiB by hand, 2026-11-28); what is left of that peak is the wave's arrival "
                      "burst, 10,000 bodies read before they are decoded. Since 2026-11-29 the three refuse pandas, "
                      "which pyarrow imported at its first conversion of a list (conf/imports.py; by hand at 1,000 "
                      "brokers the builder 99 -> 76 MiB, the front 87 -> 61, the HTTP server 116 -> 90). Next: the "
                      "front stops reading a connection while its writes queue (the bytes wait in the kernel's "
                      "socket buffers), and the mapped serving path imports no Delta or Arrow dataset modules",
    "wave_lookups": "the front answers lookups on the loop that also takes the wave's registrations and waits "
                    "for their cuts: lookups answered by a front process that takes no registrations "
                    "(NAMESRV_REMOTING_PROCESSES on a host with a core to spare)",
    "lookups_106": "NAMESRV_REMOTING_PROCESSES=N fronts over the one cut file on a host with cores to spare: "
                   "the machine's two cores are full in this phase (the front at 84 % of a core answers 1,667 "
                   "cluster infos a second, 2 GB/s, and the fleet's own loop reads them; RocketMQ answers 63 "
                   "and refuses 323 re-registrations a second SYSTEM_BUSY meanwhile). Since 2026-11-29 the front "
                   "writes large answers from a queue, a megabyte per turn after the turn's reads (p99 5.4 s "
                   "with 14,690 unanswered -> 115 ms, none unanswered; by hand 37-39 ms over 40 s). Bounding "
                   "the answers still draining on their connections as well gave no better (by hand 58 ms; "
                   "docs/scaling.md, decision 31)",
}


def by_role(phase: dict[str, Any]) -> str:
    """Ours by process role, % of a core (roles that cost nothing left out)."""
    return ", ".join(f"{k} {v}" for k, v in phase.get("per_role_pct", {}).items() if v)


def pss_by_role(phase: dict[str, Any]) -> str:
    """Ours by process role, PSS in MiB (runs before 2026-11-27 did not record it)."""
    per = phase.get("per_role_pss_mib")
    return ", ".join(f"{k} {v}" for k, v in per.items()) if per else "not recorded in this run"


def _memory(phase: dict[str, Any], limit_mib: float) -> str:
    """What a row adds when its PSS is over the target: the memory profile and the next change."""
    if phase["pss_mib"] <= limit_mib:
        return ""
    return f". PSS by process, MiB: {pss_by_role(phase)}. PSS next: {NEXT['memory']}"


def _missed(lag: dict[str, Any]) -> str:
    """Looks at which a broker was absent from the served list (its pages read across cuts)."""
    return f"; {lag['missed']:,} looks missed the broker" if lag.get("missed") else ""


def _lookups(summary: dict[str, Any] | None) -> str:
    """The clients' lookups in a window: p99 / max ms, and how many went unanswered."""
    if not summary or not summary.get("sent"):
        return "–"
    if summary.get("p99_ms") is None:
        return f"none answered of {summary['sent']:,}"
    lost = summary.get("unanswered", 0) + summary.get("failed", 0)
    return f"{summary['p99_ms']:,.1f} / {summary['max_ms']:,.0f}" + (f" ({lost:,} unanswered)" if lost else "")


def _short(reached: bool, profile: str, next_key: str) -> str:
    """What a row adds when its target is not reached: the profile and the next change."""
    return "" if reached else f". Profile, ours by process: {profile}. Next: {NEXT[next_key]}"


def fleet_report(rep: Report, results: dict[str, dict[int, dict[str, Any]]], seconds: float) -> None:
    """The fleet part's section, target rows and plot from its figures."""
    from bench import broker_fleet, fleet, lookup_clients
    sizes = sorted(results["ours"])
    fleet.plot(results, FLEET_PLOT)
    lines = [
        "A fleet as RocketMQ brokers with default settings behave (`bench/fleet.py`, `bench/broker_fleet.py`): each "
        "broker on its own connection and its own timer, its registration holding a default 5.3.3 broker's 13 system "
        "topics beside its own, and a client for every 10 brokers looking up 10 topics every 30 s on its own "
        f"connection (connections capped at {broker_fleet.MAX_CONNECTIONS:,}: every process here may open 20,000 "
        "files, so past that brokers share connections, each still on its own timer). Every broker registered once, "
        "then a full REGISTER_BROKER with an unchanged data version "
        "every 30 s (`register`: the liveness path alone); then BROKER_HEARTBEAT (904) instead of the "
        "re-registrations (`heartbeat`); then the re-registrations plus every broker's GET_BROKER_CLUSTER_INFO every "
        "5 s (`register+106`: the whole default fleet; last, because a side that cannot keep up with it works off "
        f"its backlog long after). Each phase settles for {fleet.SETTLE_S:.0f} s and is measured "
        f"for {seconds} s over every process of the side, those started within the window included (ours: the "
        "launcher's tree, the embedded Kafka included; RocketMQ: NamesrvStartup with `bin/runserver.sh`'s JVM options "
        "(4 GiB heap, G1, full JIT) and its default thread pools). The clients' route lookups (GET_ROUTEINFO_BY_TOPIC) "
        "during each phase are timed too, in a process of the clients' own (`bench/lookup_clients.py`); one not "
        f"answered within {lookup_clients.LOOKUP_TIMEOUT_S:.0f} s, a client's "
        "own timeout, is unanswered. One side after the other, in this run, on this machine.", "",
        f"![CPU per liveness signal against fleet size]({FLEET_PLOT.relative_to(ROOT).as_posix()})", "",
        "A side that cannot answer as fast as the fleet sends slows the fleet down (a broker waits for its "
        "registration's answer), so the signals each side was sent are shown against the offered rate "
        "(brokers ÷ 30 s): a side that took fewer was saturated, and its CPU is a floor, not its cost.", "",
        "| brokers × topics | phase | CPU ours / RocketMQ, % of a core | ratio | PSS ours / RocketMQ, MiB | "
        "signals/s taken ours / RocketMQ (offered) | CPU per signal ours / RocketMQ, ms | "
        "lookups p99 / max ms, ours; RocketMQ | ours by process, % of a core |",
        "|---|---|---|---|---|---|---|---|---|"]
    for n in sizes:
        o, j = results["ours"][n], results["rocketmq"][n]
        if fleet.IDLE in o and fleet.IDLE in j:
            a, b = o[fleet.IDLE], j[fleet.IDLE]
            lines.append(f"| {n:,} × {o['topics']} | {fleet.IDLE} (after the fleet unregistered) | {a['cpu_pct']:.2f} / "
                         f"{b['cpu_pct']:.2f} | {a['cpu_pct'] / max(b['cpu_pct'], 1e-9):.1f} | {a['pss_mib']:.0f} / "
                         f"{b['pss_mib']:.0f} | | | | {by_role(a)} |")
        for name, _, _ in fleet.PHASES:
            if name not in o or name not in j:  # a side not held measures its wave alone (fleet.not_held)
                continue
            a, b = o[name], j[name]
            lines.append(f"| {n:,} × {o['topics']} | {name} | {a['cpu_pct']:.1f} / {b['cpu_pct']:.1f} | "
                         f"{a['cpu_pct'] / b['cpu_pct']:.2f} | {a['pss_mib']:.0f} / {b['pss_mib']:.0f} | "
                         f"{fleet.taken_per_s(a):.0f} / {fleet.taken_per_s(b):.0f} ({n / 30:.0f}) | "
                         f"{_ms(fleet.per_signal_ms(a))} / {_ms(fleet.per_signal_ms(b))} | "
                         f"{_lookups(a.get('lookups'))}; {_lookups(b.get('lookups'))} | {by_role(a)} |")
        busy = [f"{side} {r['refused_busy']:,}" for side, r in (("ours", o), ("RocketMQ", j)) if r.get("refused_busy")]
        busy_note = f" (refused by flow control and sent again a period later: {', '.join(busy)})" if busy else ""
        lines.append(f"| {n:,} × {o['topics']} | first registrations, until the last route is answered{busy_note}, s | "
                     f"{_wave(o, n)} / {_wave(j, n)} | {_wave_ratio(o, j)} "
                     f"| | | | {_lookups(o.get('wave_lookups'))}; {_lookups(j.get('wave_lookups'))} | |")
        if "live_lag" in o:
            lag = o["live_lag"]
            lines.append(f"| {n:,} × {o['topics']} | served `lastUpdateTimestamp` behind each broker's newest "
                         f"signal: most signals behind; max / p99 s ({lag['samples']:,} looks, one a second for "
                         f"{fleet.SETTLE_S:.0f} s{_missed(lag)}) | {lag.get('max_signals_behind', '?')}; {lag['max_s']:.1f} / "
                         f"{lag['p99_s']:.1f} | | | | | | |")
    when = ", ".join(f"{n:,} at {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(results['ours'][n]['measured']))}"
                     for n in sizes if "measured" in results["ours"][n])
    if when:
        lines += ["", f"Measured: {when}."]
    rep.section("A default-configured fleet, side by side with RocketMQ's NameServer", lines)
    _targets(rep, results)


def _ms(value: float | None) -> str:
    return "– (none taken)" if value is None else f"{value:.3f}"


def _wave(side: dict[str, Any], brokers: int, unit: str = "") -> str:
    """The first wave's time, or how far a side not held got (bench/fleet.not_held)."""
    if side.get("registered_s") is not None:
        return f"{side['registered_s']:.1f}{unit}"
    served = f", {side['served_brokers']:,} served" if "served_brokers" in side else ""
    return (f"not held: {side.get('wave_answered', 0):,} of {brokers:,} answered after "
            f"{side.get('wave_budget_s', 0):.0f} s{served}")


def _wave_ratio(o: dict[str, Any], j: dict[str, Any]) -> str:
    if o.get("registered_s") is None or j.get("registered_s") is None:
        return "–"
    return f"{o['registered_s'] / j['registered_s']:.1f}"


SERVING_ROLES = ("http", "remoting", "cutbuilder")


def serving_pss(phase: dict[str, Any]) -> tuple[float, str, bool]:
    """The PSS of the serving processes (HTTP server, remoting front, the host's cut builder) in a
    phase, its parts, and whether it is exact: runs before the cut builder had a role of its own
    (2026-11-27) counted it under `other` with the job's worker daemon, so their figure is an upper
    bound that takes `other` in."""
    per = phase.get("per_role_pss_mib") or {}
    exact = "cutbuilder" in per
    roles = SERVING_ROLES if exact else (*SERVING_ROLES[:2], "other")
    total = float(sum(per.get(r, 0) for r in roles))
    parts = ", ".join(f"{r} {per.get(r, 0)}" for r in roles)
    return total, parts, exact


def _targets(rep: Report, results: dict[str, dict[int, dict[str, Any]]]) -> None:
    """The issues' targets for each fleet size measured (docs/scaling.md keeps their history)."""
    from bench import fleet
    ours, theirs = results["ours"], results["rocketmq"]
    if 1000 in ours:
        o, j = ours[1000], theirs[1000]
        a, b = o["register"], j["register"]
        ratio = a["cpu_pct"] / b["cpu_pct"]
        reached = ratio <= 1.5 and a["pss_mib"] <= 1024
        rep.target("1,000 × 10 re-registering every 30 s: CPU vs RocketMQ's; PSS", "≤ 1.5×; ≤ 1 GiB",
                   f"{a['cpu_pct']:.1f} vs {b['cpu_pct']:.1f} % of a core ({ratio:.2f}×); PSS {a['pss_mib']:.0f} MiB"
                   + _short(ratio <= 1.5, by_role(a), "register")
                   + _memory(a, 1024), reached)
        a, b = o["heartbeat"], j["heartbeat"]
        ratio = a["cpu_pct"] / b["cpu_pct"]
        rep.target("1,000 × 10 heartbeating (904) every 30 s: CPU vs RocketMQ's", "≤ 3×",
                   f"{a['cpu_pct']:.1f} vs {b['cpu_pct']:.1f} % of a core ({ratio:.2f}×)"
                   + _short(ratio <= 3, by_role(a), "heartbeat"), ratio <= 3)
        whole = o["register+106"]
        ratio = whole["cpu_pct"] / j["register+106"]["cpu_pct"]
        rep.target("whole default fleet: 1,000 brokers, also 106 every 5 s, CPU vs RocketMQ's; PSS",
                   "≤ 1.5×; ≤ 1.0 GiB", f"{whole['cpu_pct']:.1f} vs {j['register+106']['cpu_pct']:.1f} % of a core "
                   f"({ratio:.2f}×); PSS {whole['pss_mib']:.0f} MiB" + _short(ratio <= 1.5, by_role(whole), "register")
                   + _memory(whole, 1024),
                   ratio <= 1.5 and whole["pss_mib"] <= 1024)
        if "live_lag" in o:
            lag = o["live_lag"]
            rep.target("broker_live's lastUpdateTimestamp behind the newest signal, 1,000 brokers re-registering",
                       "≤ one heartbeat interval (the newest signal at most unserved)",
                       f"{lag.get('max_signals_behind', '?')} signal(s) behind at most; max {lag['max_s']:.1f} s "
                       f"(the fleet's own longest interval)", lag.get("max_signals_behind", 99) <= 1)
        if fleet.IDLE in o and fleet.IDLE in j:
            a, b = o[fleet.IDLE], j[fleet.IDLE]
            rep.target("no brokers at all: the whole system's CPU (embedded Kafka included)", "≤ 1 % of a core",
                       f"{a['cpu_pct']:.2f} % of a core (RocketMQ {b['cpu_pct']:.2f} %)"
                       + _short(a["cpu_pct"] <= 1, by_role(a), "idle"), a["cpu_pct"] <= 1)
        rep.target("1,000 first registrations served (no regression)", "≤ 3 s",
                   f"{o['registered_s']:.1f} s (RocketMQ {j['registered_s']:.1f} s)"
                   + ("" if o["registered_s"] <= 3 else f". Profile and next: {NEXT['first_wave_1000']}"),
                   o["registered_s"] <= 3)
    if 10_000 in ours:
        o, j = ours[10_000], theirs[10_000]
        a, b = o["register"], j["register"]
        ratio = a["cpu_pct"] / b["cpu_pct"]
        held = fleet.taken_per_s(a) >= 0.95 * 10_000 / 30
        short = "" if held else f", and only {fleet.taken_per_s(a):.0f} of {10_000 / 30:.0f} signals/s taken"
        rep.target("10,000 × 100 re-registering: CPU vs RocketMQ's; PSS; first registrations (no regression)",
                   "≤ 3×; ≤ 2 GiB; ≤ 60 s",
                   f"{a['cpu_pct']:.1f} vs {b['cpu_pct']:.1f} % of a core ({ratio:.2f}×{short}); "
                   f"PSS {a['pss_mib']:.0f} MiB; {o['registered_s']:.0f} s"
                   + _short(held and ratio <= 3, by_role(a), "register")
                   + ("" if o["registered_s"] <= 60 else f". First registrations next: {NEXT['first_wave']}")
                   + _memory(a, 2048),
                   held and ratio <= 3 and a["pss_mib"] <= 2048 and o["registered_s"] <= 60)
        a, b = o["heartbeat"], j["heartbeat"]
        ratio = a["cpu_pct"] / b["cpu_pct"]
        rep.target("10,000 × 100 heartbeating (904): CPU vs RocketMQ's", "≤ 5×",
                   f"{a['cpu_pct']:.1f} vs {b['cpu_pct']:.1f} % of a core ({ratio:.2f}×)"
                   + _short(ratio <= 5, by_role(a), "heartbeat"), ratio <= 5)
        looks = o["register+106"].get("lookups")
        if looks and looks.get("sent"):
            lost = looks.get("unanswered", 0) + looks.get("failed", 0)
            ok = (not lost and looks.get("p99_ms") is not None and looks["p99_ms"] <= 20
                  and looks["max_ms"] <= 1000)
            rep.target("route lookups while 10,000 × 100 re-register and ask 106 every 5 s",
                       "p99 ≤ 20 ms, max ≤ 1 s, none unanswered",
                       f"ours {_lookups(looks)} ms of {looks['sent']:,}; RocketMQ "
                       f"{_lookups(j['register+106'].get('lookups'))} ms"
                       + _short(ok, by_role(o["register+106"]), "lookups_106"), ok)
        phases = [p for p in ("register", "register+106") if o.get(p, {}).get("per_role_pss_mib")]
        if phases:
            figures = {p: serving_pss(o[p]) for p in phases}
            worst_pss = max(total for total, _, _ in figures.values())
            exact = all(e for _, _, e in figures.values())
            ok = exact and worst_pss <= 300
            text = "; ".join(f"{p}: {'' if e else 'at most '}{total:.0f} MiB ({parts})"
                             for p, (total, parts, e) in figures.items())
            if not exact:
                text += " (`other` holds the cut builder with the job's worker daemon in this run)"
            rep.target("PSS of all serving processes together (HTTP server, remoting front, the host's cut "
                       "builder), 10,000 × 100, re-registering and with 106 every 5 s", "≤ 300 MiB",
                       text + ("" if ok else f". Next: {NEXT['serving_memory']}"), ok)
    if 20_000 in ours:
        o, j = ours[20_000], theirs[20_000]
        waves = [w for w in (o.get("wave_lookups"), o.get("register", {}).get("lookups")) if w and w.get("sent")]
        if waves:
            lost = sum(w.get("unanswered", 0) + w.get("failed", 0) for w in waves)
            worst_p99 = max((w["p99_ms"] for w in waves if w.get("p99_ms") is not None), default=None)
            worst_max = max((w["max_ms"] for w in waves if w.get("max_ms") is not None), default=None)
            ok = (not lost and worst_p99 is not None and worst_p99 <= 20 and worst_max is not None
                  and worst_max <= 250)
            rep.target("route lookups during a 20,000-broker registration wave and its re-registrations",
                       "none unanswered; p99 ≤ 20 ms; max ≤ 250 ms",
                       f"during: {_lookups(o.get('wave_lookups'))} ms; re-registrations: "
                       f"{_lookups(o.get('register', {}).get('lookups'))} ms (RocketMQ during: "
                       f"{_lookups(j.get('wave_lookups'))}; re-registrations: "
                       f"{_lookups(j.get('register', {}).get('lookups'))})"
                       + _short(ok, by_role(o.get("register", {})), "wave_lookups"), ok)
    if 100_000 in ours:
        o, j = ours[100_000], theirs[100_000]
        a, b = o["register"], j["register"]
        offered = 100_000 / 30
        tuned = ", ".join(f"{k}={v}" for k, v in o.get("settings", {}).items())
        held = fleet.taken_per_s(a) >= 0.95 * offered and a["pss_mib"] <= 4096
        rep.target("100,000 × 10 re-registering every 30 s: every signal taken; PSS"
                   + (f" ({tuned})" if tuned else ""), f"{offered:,.0f} signals/s taken; ≤ 4 GiB",
                   f"{fleet.taken_per_s(a):,.0f} of {offered:,.0f} signals/s taken ({a.get('refused_busy_per_s', 0):,.0f}/s "
                   f"refused SYSTEM_BUSY) at {a['cpu_pct']:.0f} % of a core, "
                   f"PSS {a['pss_mib']:.0f} MiB, first registrations {_wave(o, 100_000, ' s')} (RocketMQ: "
                   f"{fleet.taken_per_s(b):,.0f}/s at {b['cpu_pct']:.1f} %, PSS {b['pss_mib']:.0f} MiB, "
                   f"{_wave(j, 100_000, ' s')})" + _short(held, by_role(a), "wave"), held)
        waves = [w for w in (o.get("wave_lookups"), a.get("lookups")) if w and w.get("sent")]
        if waves:
            lost = sum(w.get("unanswered", 0) + w.get("failed", 0) for w in waves)
            worst = max((w["p99_ms"] for w in waves if w.get("p99_ms") is not None), default=None)
            ok = not lost and worst is not None and worst <= 50
            rep.target("route lookups during the 100,000-broker registration wave and after it",
                       "none unanswered; p99 ≤ 50 ms",
                       f"during: {_lookups(o.get('wave_lookups'))} ms; after: {_lookups(a.get('lookups'))} ms "
                       f"(RocketMQ during: {_lookups(j.get('wave_lookups'))}; after: {_lookups(b.get('lookups'))})"
                       + _short(ok, by_role(a), "wave"), ok)
