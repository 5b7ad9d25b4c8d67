"""A default-configured broker fleet, ours and RocketMQ's NameServer side by side (the `fleet` part).

The fleet is `bench/broker_fleet.py`'s: each broker on its own connection and its own timer, its
registration holding a default broker's 13 system topics beside its own, and a client for every
10 brokers looking up 10 topics every 30 s. Measured in phases after one registration of every
broker: the re-registrations every 30 s alone (`register`, the liveness path), 904s every 30 s
instead of them (`heartbeat`), and the re-registrations with every broker's GET_BROKER_CLUSTER_INFO
every 5 s (`register+106`, the whole default 5.x fleet).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import broker_fleet, versus
from ops.procs import pss_kib
from remoting.client import RemotingClient

# The 106 phase last: a side that cannot answer every broker's 106 every 5 s (RocketMQ's NameServer
# at 10,000 brokers) still works off their backlog for minutes after the fleet stops asking, which
# a phase after it would be charged for.
PHASES = (("register", broker_fleet.REGISTER, False), ("heartbeat", broker_fleet.HEARTBEAT, False),
          ("register+106", broker_fleet.REGISTER, True))
SETTLE_S = 30.0  # one whole period of the fleet before a phase is measured
# The phase measured after the fleet has gone (every broker unregistered by its connection's close):
# what a side costs doing nothing. After the phases, not before, so that the first registrations are
# timed on a side just started, as before this phase existed.
IDLE = "no brokers"


def served_live(http_url: str) -> dict[str, int]:
    """Every served broker address's `lastUpdateTimestamp` (the dashboard's group list, paged)."""
    import requests
    out: dict[str, int] = {}
    offset = 0
    while True:
        page = requests.get(f"{http_url}/dashboard/api/groups", params={"offset": offset, "limit": 500},
                            timeout=30).json()
        for group in page["groups"]:
            for m in group["members"]:
                if m["lastUpdateTimestamp"] is not None:
                    out[m["addr"]] = m["lastUpdateTimestamp"]
        offset += len(page["groups"])
        if not page["groups"] or offset >= page["total"]:
            return out


def live_lag(fleet: broker_fleet.BrokerFleet, live: Callable[[], dict[str, int]], seconds: float) -> dict[str, float]:
    """How far the served `lastUpdateTimestamp` trails each broker, sampled every second for
    `seconds`: in signals (how many of the broker's signals sent before the look are newer than
    the served time: 1 = the newest is not served yet, the previous one is) and in time (newest
    sent minus served, which reaches the broker's own interval whenever it is one signal behind)."""
    behind: list[int] = []
    lags: list[float] = []
    missed = 0
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        sent = {a: list(ts) for a, ts in fleet.last_sent.items()}
        served = live()
        for a, ts in sent.items():
            at = served.get(a)
            if at is None:  # not in this look (its pages read across cuts): no figure, counted apart
                missed += 1
                continue
            behind.append(sum(1 for t in ts if t > at))
            lags.append(max(0, ts[-1] - at) / 1000)
        time.sleep(1.0)
    lags.sort()
    return {"max_signals_behind": max(behind, default=-1), "max_s": lags[-1] if lags else float("nan"),
            "p99_s": lags[int(0.99 * (len(lags) - 1))] if lags else float("nan"), "samples": len(lags),
            "missed": missed}


def _phase_cost(pids: Callable[[], list[int]], roles: Callable[[], dict[int, str]] | None,
                seconds: float) -> dict[str, Any]:
    """CPU and memory of the side over `seconds`, with ours split by process role."""
    meter = versus.CpuMeter(pids)
    phase: dict[str, Any] = dict(versus.cost(pids, seconds, meter))
    if roles is not None:
        per: dict[str, float] = {}
        names = roles()
        for pid, cpu in meter.by_pid().items():
            role = names.get(pid, "ended")
            per[role] = per.get(role, 0.0) + 100 * cpu / seconds
        phase["per_role_pct"] = {k: round(v, 1) for k, v in sorted(per.items())}
        memory: dict[str, float] = {}
        for pid in pids():
            role = names.get(pid, "ended")
            memory[role] = memory.get(role, 0.0) + pss_kib(pid) / 1024
        phase["per_role_pss_mib"] = {k: round(v) for k, v in sorted(memory.items()) if round(v)}
    return phase


def measure_side(addr: str, brokers: int, topics: int, seconds: float,
                 pids: Callable[[], list[int]], roles: Callable[[], dict[int, str]] | None = None,
                 live: Callable[[], dict[str, int]] | None = None,
                 wave_budget_s: float = 1800.0) -> dict[str, Any]:
    """Register the fleet (timed until its last route is answered), then each phase of PHASES,
    then the side with no broker at all (IDLE, SETTLE_S after the fleet closed its connections).
    `live`: the side's served lastUpdateTimestamp per address, sampled during the first phase's
    settling period (so its reads are not in the phase's CPU). A side that has not answered every
    first registration within `wave_budget_s` is not held: `not_held` measures it as it stands."""
    fleet = broker_fleet.BrokerFleet(addr, brokers, topics, mode=broker_fleet.REGISTER, wave_budget_s=wave_budget_s)
    try:
        if not fleet.wave_held:
            return not_held(fleet, brokers, seconds, pids, roles, live, wave_budget_s)
        with RemotingClient(addr, timeout_s=120) as reader:  # a lookup during a large wave may be slow, not lost
            versus.wait_route(reader, broker_fleet.user_topic(brokers - 1, topics - 1), present=True,
                              timeout_s=1800)
        out: dict[str, Any] = {"registered_s": time.monotonic() - fleet.started, "answered_s": fleet.register_s,
                               **_wave_record(fleet)}
        fleet.start()
        for name, mode, cluster_info in PHASES:
            fleet.mode, fleet.cluster_info = mode, cluster_info
            if live is not None and name == PHASES[0][0]:
                out["live_lag"] = live_lag(fleet, live, SETTLE_S)
            else:
                time.sleep(SETTLE_S)
            info = fleet.stats.cluster_info_answered
            phase = _fleet_window(fleet, pids, roles, seconds)
            if cluster_info:
                phase["cluster_info_per_s"] = (fleet.stats.cluster_info_answered - info) / seconds
            out[name] = phase
            print(f"   {brokers} brokers, {name}: {phase}", flush=True)
        out["refused"] = fleet.stats.failed
        out["failures"] = fleet.failures[:5]
    finally:
        fleet.close()
    time.sleep(SETTLE_S)
    out[IDLE] = _phase_cost(pids, roles, seconds)
    print(f"   {brokers} brokers gone, {IDLE}: {out[IDLE]}", flush=True)
    return out


def _wave_record(fleet: broker_fleet.BrokerFleet) -> dict[str, Any]:
    """What a side's first wave left, held or not: refusals, connections, the clients' lookups."""
    return {"refused_busy": fleet.refused_busy, "connections": fleet.broker_conns,
            "client_connections": fleet.client_conns, "wave_lookups": fleet.lookup_summary()}


def _fleet_window(fleet: broker_fleet.BrokerFleet, pids: Callable[[], list[int]],
                  roles: Callable[[], dict[int, str]] | None, seconds: float) -> dict[str, Any]:
    """One measured window of the fleet as it runs: the side's cost, and the signals sent, skipped
    and refused SYSTEM_BUSY and the clients' lookups within it."""
    sent, skipped, busy, lookups = fleet.sent, fleet.stats.skipped, fleet.stats.signals_refused_busy, \
        fleet.lookup_mark()
    phase = _phase_cost(pids, roles, seconds)
    phase["signals_per_s"] = (fleet.sent - sent) / seconds
    phase["skipped"] = fleet.stats.skipped - skipped
    phase["refused_busy_per_s"] = (fleet.stats.signals_refused_busy - busy) / seconds
    phase["lookups"] = fleet.lookup_summary(lookups)
    return phase


def not_held(fleet: broker_fleet.BrokerFleet, brokers: int, seconds: float, pids: Callable[[], list[int]],
             roles: Callable[[], dict[int, str]] | None, live: Callable[[], dict[str, int]] | None,
             budget_s: float) -> dict[str, Any]:
    """A wave the side did not take within its budget, measured as it stands: the first
    registrations answered, the brokers served, and one `register` phase of the fleet as it runs
    (brokers re-registering from their own answer or give-up, the rest still waiting), whose
    signals taken fall short of the offered rate. No later phase: a side that is behind would be
    charged for its backlog in each. Saved as a row, never an exception, so the run keeps it."""
    out: dict[str, Any] = {"held": False, "wave_budget_s": budget_s, "registered_s": None, "answered_s": None,
                           "wave_answered": fleet.wave_answered, **_wave_record(fleet)}
    if live is not None:
        try:
            out["served_brokers"] = len(live())
        except Exception as exc:  # a side too busy to page its groups: said, not fatal to the row
            out["served_brokers_error"] = f"{type(exc).__name__}: {exc}"
    answered, taken = fleet.wave_answered, fleet.stats.answered
    phase = _fleet_window(fleet, pids, roles, seconds)
    # sent is what the fleet offered; a side refusing them SYSTEM_BUSY (flow control) took only
    # the answered ones
    phase["signals_answered_per_s"] = (fleet.stats.answered - taken) / seconds
    phase["wave_answered_per_s"] = (fleet.wave_answered - answered) / seconds
    out["register"] = phase
    out["wave_answered_end"] = fleet.wave_answered
    out["refused"] = fleet.stats.failed
    out["failures"] = fleet.failures[:5]
    print(f"   {brokers} brokers, not held after {budget_s:.0f} s: {fleet.wave_answered:,} first registrations "
          f"answered; {phase}", flush=True)
    return out


def plot(results: dict[str, dict[int, dict[str, Any]]], path: Path) -> None:
    """CPU per liveness signal against fleet size, per side and phase (log-log), as a PNG."""
    import matplotlib
    import matplotlib.ticker
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    styles = {"ours": "-", "rocketmq": "--"}
    for side, by_size in results.items():
        label = "ours" if side == "ours" else "RocketMQ 5.3.3"
        for name, _, _ in PHASES:
            points = [(n, per_signal_ms(by_size[n][name])) for n in sorted(by_size) if name in by_size[n]]
            drawn = [(n, y) for n, y in points if y is not None]
            if drawn:
                line, = ax.plot([n for n, _ in drawn], [y for _, y in drawn], styles[side], marker="o",
                                label=f"{label}: {name}")
                # a size not held (bench/fleet.not_held): what it took, a floor, drawn hollow
                held_not = [(n, y) for n, y in drawn if by_size[n].get("held") is False]
                if held_not:
                    ax.plot([n for n, _ in held_not], [y for _, y in held_not], "o", markersize=10,
                            markerfacecolor="white", markeredgecolor=line.get_color())
            for n, y in points:
                if y is None:  # took no signal at all in the window: no cost per signal to draw
                    ax.annotate(f"{label} at {n:,}: not held,\nno signal taken ({by_size[n][name]['cpu_pct']:.0f} % "
                                "of a core)", xy=(n, 1.0), xycoords=("data", "axes fraction"), xytext=(-8, -14),
                                textcoords="offset points", ha="right", va="top", fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("brokers (each alive every 30 s)")
    ax.set_ylabel("CPU per liveness signal, ms (all processes)")
    ax.set_title("What keeping a fleet alive costs, per signal (hollow: not held, a floor)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def taken_per_s(phase: dict[str, Any]) -> float:
    """Liveness signals a second the side took: those answered SUCCESS where counted (a side not
    held), else those sent less those refused SYSTEM_BUSY (a refusal answered in the window may
    be of a signal sent before it, hence the floor at 0)."""
    if "signals_answered_per_s" in phase:
        return float(phase["signals_answered_per_s"])
    return max(0.0, float(phase["signals_per_s"]) - float(phase.get("refused_busy_per_s", 0.0)))


def per_signal_ms(phase: dict[str, Any]) -> float | None:
    """CPU (all the side's processes) per liveness signal taken, ms: 10 × %core ÷ signals/s; None
    when the side took none."""
    taken = taken_per_s(phase)
    return 10 * float(phase["cpu_pct"]) / taken if taken > 0 else None
