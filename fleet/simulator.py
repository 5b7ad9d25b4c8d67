"""A broker fleet simulator: REGISTER_BROKER then periodic heartbeats and re-registrations.

`./run.sh simulate --brokers N --topics M [--slaves K] [--period S]` publishes, for each of N
broker groups (broker-0 .. broker-N-1 in DefaultCluster), a master and K slaves, each with M
topics (TopicTest plus Topic-1 .. Topic-(M-1)), then a heartbeat from every broker every
S seconds and a full re-registration every 30 s, as RocketMQ brokers do. Bounded by
--duration (default: until Ctrl-C) so loops always end.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from conf import Config, load_config
from conf.version import argument_parser
from eventlog.publisher import EventPublisher
from eventlog.topics import ensure_topic, retention_configs
from schemas import events as ev

REREGISTER_PERIOD_S = 30.0


@dataclass(frozen=True)
class SimBroker:
    cluster: str
    name: str
    broker_id: int
    addr: str
    ha_addr: str


def fleet(brokers: int, slaves: int, *, cluster: str = "DefaultCluster", base_port: int = 10911) -> list[SimBroker]:
    """Deterministic broker addresses on 127.0.0.1 (they are names only; nothing listens there)."""
    out = []
    for g in range(brokers):
        for i in range(slaves + 1):
            port = base_port + (g * (slaves + 1) + i) * 10
            out.append(SimBroker(cluster, f"broker-{g}", i, f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"))
    return out


def topic_table(topics: int, *, queues: int = 8) -> dict[str, dict[str, Any]]:
    names = ["TopicTest"] + [f"Topic-{i}" for i in range(1, topics)]
    return {n: ev.topic_config(n, read=queues, write=queues) for n in names[:max(topics, 0)]}


def registrations(members: list[SimBroker], topics: dict[str, dict[str, Any]], counter: int,
                  timeout_ms: int | None = None) -> list[dict[str, Any]]:
    return [ev.register_broker_event(cluster=b.cluster, broker_name=b.name, broker_id=b.broker_id, addr=b.addr,
                                     ha_addr=b.ha_addr, topics=topics, timeout_ms=timeout_ms,
                                     data_version={"timestamp": 1, "counter": counter, "stateVersion": 0})
            for b in members]


def heartbeats(members: list[SimBroker]) -> list[dict[str, Any]]:
    return [ev.heartbeat_event(cluster=b.cluster, broker_name=b.name, broker_id=b.broker_id, addr=b.addr)
            for b in members]


def run(cfg: Config, *, brokers: int, topics: int, slaves: int, period_s: float, duration_s: float | None,
        timeout_ms: int | None, stop: threading.Event) -> dict[str, int]:
    members = fleet(brokers, slaves)
    table = topic_table(topics)
    sent = {"registrations": 0, "heartbeats": 0}
    # publishers create no topic (eventlog.topics.no_topic_creation): a fleet may start before the job
    ensure_topic(cfg.bootstrap, cfg.kafka_topic, cfg.kafka_partitions, retention_configs(cfg))
    with EventPublisher(cfg.bootstrap, cfg.kafka_topic, max_message_bytes=cfg.max_message_bytes) as pub:
        pub.publish(registrations(members, table, 1, timeout_ms))
        sent["registrations"] += len(members)
        print(f"registered {len(members)} broker(s) in {brokers} group(s), {len(table)} topic(s) each", flush=True)
        start = last_register = time.monotonic()
        report = ProgressLine(start)
        while not stop.wait(period_s):
            now = time.monotonic()
            if duration_s is not None and now - start >= duration_s:
                break
            if now - last_register >= REREGISTER_PERIOD_S:
                pub.publish(registrations(members, table, 1, timeout_ms))
                sent["registrations"] += len(members)
                last_register = now
            else:
                pub.publish(heartbeats(members))
                sent["heartbeats"] += len(members)
            line = report.update(time.monotonic(), sent)
            if line is not None:
                print(line, flush=True)
    return sent


class ProgressLine:
    """A progress line at most every `every_s`: totals so far and the rate since the last line."""

    def __init__(self, start: float, every_s: float = 10.0) -> None:
        self.start, self.every_s = start, every_s
        self.last_t = start
        self.last: dict[str, int] = {}

    def update(self, now: float, totals: dict[str, int]) -> str | None:
        if now - self.last_t < self.every_s:
            return None
        span = now - self.last_t
        parts = [f"{k} {v:,} ({(v - self.last.get(k, 0)) / span:,.0f}/s)" for k, v in totals.items()]
        self.last_t, self.last = now, dict(totals)
        return f"[{now - self.start:6.0f} s] sent " + ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("./run.sh simulate", __doc__.split("\n\n")[0])
    p.add_argument("--brokers", type=int, default=2, help="broker groups (default 2)")
    p.add_argument("--topics", type=int, default=3, help="topics per broker (default 3)")
    p.add_argument("--slaves", type=int, default=1, help="slaves per group (default 1)")
    p.add_argument("--period", type=float, default=10.0, help="heartbeat period in seconds (default 10)")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds (default: Ctrl-C)")
    p.add_argument("--timeout-ms", type=int, default=None, help="heartbeatTimeoutMillis to register with")
    args = p.parse_args(argv)
    for name in ("brokers", "topics"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    if args.slaves < 0 or args.period <= 0:
        p.error("--slaves must be >= 0 and --period > 0")
    cfg = load_config()
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"simulating on {cfg.bootstrap} topic {cfg.kafka_topic}; Ctrl-C to stop", flush=True)
    sent = run(cfg, brokers=args.brokers, topics=args.topics, slaves=args.slaves, period_s=args.period,
               duration_s=args.duration, timeout_ms=args.timeout_ms, stop=stop)
    print(f"sent {sent['registrations']} registration(s), {sent['heartbeats']} heartbeat(s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
