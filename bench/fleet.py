"""A default-configured broker fleet, ours and RocketMQ's NameServer side by side (the `fleet` part).

What a RocketMQ broker with default settings sends a NameServer (read from RocketMQ 5.3's
`BrokerController.start`):

- its whole REGISTER_BROKER every `registerNameServerPeriod` (30 s), data version unchanged
  (`forceRegister` defaults to true); BROKER_HEARTBEAT (904) only with `enableSlaveActingMaster`;
- a GET_BROKER_CLUSTER_INFO (106) every 5 s (`refreshMetadata`, 5.x), whose answer lists the
  whole fleet.

Each side gets the same fleet over kept-open remoting connections (`bench/versus.py`), measured
in phases after one registration of every broker: the re-registrations alone (the liveness path),
the same with the 106 traffic (the whole default fleet), and a 904 fleet (the second row).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import versus
from remoting import codes
from remoting.client import RemotingClient

PHASES = (("register", versus.REGISTER, False), ("register+106", versus.REGISTER, True),
          ("heartbeat", versus.HEARTBEAT, False))
CLUSTER_INFO_PERIOD_S = 5.0  # a 5.x broker's refreshMetadata
SETTLE_S = 30.0  # one whole period of the fleet before a phase is measured


class ClusterInfoLoad:
    """Every broker's GET_BROKER_CLUSTER_INFO every 5 s, spread over the period, on one connection
    (pipelined per half-second tick); bounded by `stop`."""

    def __init__(self, addr: str, brokers: int) -> None:
        self.addr, self.brokers, self.answered = addr, brokers, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ClusterInfoLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        per_tick = max(1, round(self.brokers * 0.5 / CLUSTER_INFO_PERIOD_S))
        with RemotingClient(self.addr, timeout_s=60) as c:
            while not self._stop.wait(0.5):
                for _ in range(per_tick):
                    c.send(codes.GET_BROKER_CLUSTER_INFO)
                for _ in range(per_tick):
                    if c.receive().code == codes.SUCCESS:
                        self.answered += 1


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


def live_lag(fleet: versus.RemotingFleet, live: Callable[[], dict[str, int]], seconds: float) -> dict[str, float]:
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


def measure_side(addr: str, brokers: int, topics: int, seconds: float,
                 pids: Callable[[], list[int]], roles: Callable[[], dict[int, str]] | None = None,
                 live: Callable[[], dict[str, int]] | None = None) -> dict[str, Any]:
    """Register the fleet (timed until its last route is answered), then each phase of PHASES.
    `live`: the side's served lastUpdateTimestamp per address, sampled during the first phase's
    settling period (so its reads are not in the phase's CPU)."""
    from bench.system import cpu_seconds
    fleet = versus.RemotingFleet(addr, brokers, topics, mode=versus.REGISTER)
    try:
        with RemotingClient(addr, timeout_s=120) as reader:  # a lookup during a large wave may be slow, not lost
            versus.wait_route(reader, f"VsTopic-{brokers - 1}-{topics - 1}", present=True, timeout_s=1800)
        out: dict[str, Any] = {"registered_s": time.monotonic() - fleet.started, "answered_s": fleet.register_s,
                               "refused_busy": fleet.refused_busy}
        fleet.start()
        for name, mode, cluster_info in PHASES:
            fleet.mode = mode
            load = ClusterInfoLoad(addr, brokers) if cluster_info else None
            with load if load is not None else contextlib.nullcontext():
                if live is not None and name == PHASES[0][0]:
                    out["live_lag"] = live_lag(fleet, live, SETTLE_S)
                else:
                    time.sleep(SETTLE_S)
                before = {pid: cpu_seconds([pid]) for pid in pids()}
                sent = fleet.sent
                phase: dict[str, Any] = dict(versus.cost(pids, seconds))
                phase["signals_per_s"] = (fleet.sent - sent) / seconds
                if roles is not None:
                    per: dict[str, float] = {}
                    for pid, role in roles().items():
                        if pid in before:
                            per[role] = per.get(role, 0.0) + 100 * (cpu_seconds([pid]) - before[pid]) / seconds
                    phase["per_role_pct"] = {k: round(v, 1) for k, v in sorted(per.items())}
                if load is not None:
                    phase["cluster_info_per_s"] = load.answered / (seconds + SETTLE_S)
            out[name] = phase
            print(f"   {brokers} brokers, {name}: {phase}", flush=True)
        out["refused"] = len(fleet.failures)
        return out
    finally:
        fleet.close()


def plot(results: dict[str, dict[int, dict[str, Any]]], path: Path) -> None:
    """CPU per liveness signal against fleet size, per side and phase (log-log), as a PNG."""
    import matplotlib
    import matplotlib.ticker
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    styles = {"ours": "-", "rocketmq": "--"}
    for side, by_size in results.items():
        for name, _, _ in PHASES:
            sizes = sorted(n for n in by_size if name in by_size[n])
            ys = [per_signal_ms(by_size[n][name]) for n in sizes]
            if sizes:
                ax.plot(sizes, ys, styles[side], marker="o",
                        label=f"{'ours' if side == 'ours' else 'RocketMQ 5.3.3'}: {name}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("brokers (each alive every 30 s)")
    ax.set_ylabel("CPU per liveness signal, ms (all processes)")
    ax.set_title("What keeping a fleet alive costs, per signal")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def per_signal_ms(phase: dict[str, Any]) -> float:
    """CPU (all the side's processes) per liveness signal sent, ms: 10 × %core ÷ signals/s."""
    return 10 * float(phase["cpu_pct"]) / max(float(phase["signals_per_s"]), 1e-9)
