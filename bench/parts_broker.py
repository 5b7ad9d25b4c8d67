"""The embedded broker (`broker` part): Tansu on its memory engine and Apache Kafka (one KRaft node),
one after the other in the same run, as `ops/embedded_kafka.py` starts them for `./run.sh`.

Per broker: start time (launch → the events topic, with its retention, exists and a first publish
is acknowledged), the idle cost (CPU, RSS, PSS) with no client traffic, then a bounded load of
100-topic registrations (what a 10,000 × 100 fleet sends every 30 s) against a topic whose
retention must act within the run, sampled every 10 s: memory, the broker's bytes on disk and
the log as Kafka reports it (end − beginning offsets). The question is which one keeps its log
bounded, and at what cost.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.report import ROOT, Report
from bench.system import cpu_seconds
from ops.procs import pss_kib, tree

PLOT = ROOT / "docs" / "embedded-broker.png"
TOPIC = "namesrv-events"
PARTITIONS = 2
RATE = 300  # registrations/s: 10,000 brokers re-registering every 30 s
TOPICS_PER_BROKER = 100
FLEET = 10_000
TICK_S = 0.1  # a batch of RATE × TICK_S registrations per tick
SAMPLE_S = 10.0
SETTLE_S = 20
# Small enough that Kafka must apply it within the run: 32 MiB a partition, 4 MiB segments, 2 min.
RETENTION_ENV = {"NAMESRV_KAFKA_RETENTION_BYTES": str(32 << 20), "NAMESRV_KAFKA_SEGMENT_BYTES": str(4 << 20),
                 "NAMESRV_KAFKA_RETENTION_MS": "120000"}
RETENTION_CHECK_MS = 5000
NAMES = {"kafka": "Apache Kafka 3.9.2 (one KRaft node, 256 MiB heap, log on disk)",
         "tansu": "Tansu 0.6.0 (memory engine)"}
MIB = 1 << 20


def broker_benchmark(rep: Report, quick: bool) -> None:
    load_s = 120 if quick else 360
    idle_s = 20 if quick else 60
    tmp = Path(tempfile.mkdtemp(prefix="namesrv-bench-broker-"))
    results: dict[str, dict[str, Any]] = {}
    try:
        for name in ("tansu", "kafka"):
            print(f"  broker {name}", flush=True)
            results[name] = _candidate(name, tmp / name, idle_s, load_s)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rep.raw["broker"] = {"load_s": load_s, "idle_s": idle_s, "rate": RATE, **results}
    _plot(results, PLOT)
    _report(rep, results, idle_s, load_s)


def _candidate(name: str, workdir: Path, idle_s: int, load_s: int) -> dict[str, Any]:
    from ops.embedded_kafka import start_kafka, start_tansu
    from ops.net import free_port
    workdir.mkdir(parents=True)
    port = free_port()
    log = workdir / f"{name}.log"
    data = workdir / "kafka"
    t0 = time.monotonic()
    if name == "tansu":
        proc: subprocess.Popen[bytes] = start_tansu(port, log)
    else:
        proc = start_kafka(port, data, log, retention_check_ms=RETENTION_CHECK_MS)
    try:
        return _measure(name, proc, f"127.0.0.1:{port}", data if name == "kafka" else None, t0, idle_s, load_s)
    finally:
        _stop(proc)


def _measure(name: str, proc: subprocess.Popen[bytes], bootstrap: str, data: Path | None, t0: float,
             idle_s: int, load_s: int) -> dict[str, Any]:
    from conf import load_config
    from eventlog.publisher import EventPublisher
    from eventlog.topics import ensure_topic, retention_configs
    ensure_topic(bootstrap, TOPIC, PARTITIONS, retention_configs(load_config(RETENTION_ENV)))
    pool = _registrations()
    record_bytes = sum(len(k) + len(v) for _, k, v in pool) / len(pool)
    with EventPublisher(bootstrap, TOPIC, max_message_bytes=1_048_576) as pub:
        pub.publish([pool[0][0]])
        start_s = time.monotonic() - t0
    print(f"    started in {start_s:.1f} s; settling {SETTLE_S} s, then idle {idle_s} s", flush=True)
    time.sleep(SETTLE_S)
    c0, w0 = _cpu(proc.pid), time.monotonic()
    time.sleep(idle_s)
    idle_pct = 100 * (_cpu(proc.pid) - c0) / (time.monotonic() - w0)
    idle_rss, idle_pss = _memory(proc.pid)
    print(f"    idle {idle_pct:.2f} % of a core, RSS {idle_rss:.0f} MiB, PSS {idle_pss:.0f} MiB; "
          f"load {RATE}/s for {load_s} s", flush=True)
    samples, published, load_cpu_pct = _load(proc, bootstrap, data, pool, load_s)
    if proc.poll() is not None:
        raise RuntimeError(f"{name} exited during the load (code {proc.returncode})")
    return {"start_s": start_s, "idle_cpu_pct": idle_pct, "idle_rss_mib": idle_rss, "idle_pss_mib": idle_pss,
            "load_cpu_pct": load_cpu_pct, "published": published, "record_bytes": record_bytes,
            "samples": samples, **_growth(samples, record_bytes)}


def _registrations() -> list[tuple[dict[str, Any], bytes, bytes]]:
    """A pool of registrations as a 10,000 × 100 fleet's brokers send them (100 topics, ~12.8 KB),
    with their encoded key and value."""
    from schemas import events as ev
    now = int(time.time() * 1000)
    pool = []
    for g in range(0, FLEET, FLEET // 500):
        host = f"10.0.{g // 250}.{g % 250 + 1}"
        topics = {f"Topic-{g}-{i}": ev.topic_config(f"Topic-{g}-{i}") for i in range(TOPICS_PER_BROKER)}
        event = ev.register_broker_event(cluster="DefaultCluster", broker_name=f"broker-{g}", broker_id=0,
                                         addr=f"{host}:10911", ha_addr=f"{host}:10912", topics=topics,
                                         data_version={"timestamp": now, "counter": g % 97, "stateVersion": 0})
        key, value = ev.encode(event)
        pool.append((event, key, value))
    return pool


def _load(proc: subprocess.Popen[bytes], bootstrap: str, data: Path | None,
          pool: list[tuple[dict[str, Any], bytes, bytes]], load_s: int) -> tuple[list[dict[str, float]], int, float]:
    """Publish RATE registrations/s for `load_s` (bounded in count and time: a publisher that falls
    behind stops at the deadline), sampling every SAMPLE_S; returns (samples, records, CPU % of a core).
    The samples' `published` counts the start's record too."""
    from kafka import KafkaConsumer, TopicPartition

    from eventlog.publisher import EventPublisher
    from eventlog.topics import no_topic_creation
    per_tick = max(1, round(RATE * TICK_S))
    total = RATE * load_s
    partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             request_timeout_ms=10_000, allow_auto_create_topics=False)
    no_topic_creation(consumer._cluster)
    samples: list[dict[str, float]] = []
    sent = sent_bytes = 0
    try:
        with EventPublisher(bootstrap, TOPIC, max_message_bytes=1_048_576) as pub:
            pub.warm()
            c0 = _cpu(proc.pid)
            began = time.monotonic()
            deadline = began + load_s
            next_sample = began
            tick = 0
            while sent < total and time.monotonic() < deadline and proc.poll() is None:
                now = time.monotonic()
                if now >= next_sample:
                    samples.append(_sample(proc.pid, consumer, partitions, data, now - began, 1 + sent, sent_bytes))
                    next_sample += SAMPLE_S
                batch = [pool[(sent + i) % len(pool)] for i in range(min(per_tick, total - sent))]
                pub.publish([e for e, _, _ in batch])
                sent += len(batch)
                sent_bytes += sum(len(k) + len(v) for _, k, v in batch)
                tick += 1
                pause = began + tick * TICK_S - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
            wall = time.monotonic() - began
            cpu_pct = 100 * (_cpu(proc.pid) - c0) / wall
        time.sleep(1)  # the last batches settle into the broker's log
        samples.append(_sample(proc.pid, consumer, partitions, data, time.monotonic() - began, 1 + sent, sent_bytes))
    finally:
        consumer.close()
    print(f"    published {sent:,} records ({sent_bytes / MIB:,.0f} MiB) in {wall:.0f} s; broker CPU "
          f"{cpu_pct:.1f} % of a core", flush=True)
    return samples, sent, cpu_pct


def _sample(pid: int, consumer: Any, partitions: list[Any], data: Path | None, t: float, sent: int,
            sent_bytes: int) -> dict[str, float]:
    rss, pss = _memory(pid)
    try:
        begin = consumer.beginning_offsets(partitions)
        end = consumer.end_offsets(partitions)
        retained = float(sum(end[tp] - begin[tp] for tp in partitions))
        first = float(sum(begin[tp] for tp in partitions))
    except Exception as exc:  # a slow answer leaves a gap in the figure, not a failed part
        print(f"    offsets at {t:.0f} s: {exc!r}", flush=True)
        retained = first = float("nan")
    return {"t": t, "rss_mib": rss, "pss_mib": pss, "disk_mib": _du(data) / MIB if data else 0.0,
            "retained": retained, "first_offset": first, "published": float(sent), "published_mib": sent_bytes / MIB}


def _growth(samples: list[dict[str, float]], record_bytes: float) -> dict[str, Any]:
    """Whether the retained log stopped growing: over the load's second half it grew by at most a
    tenth of what was published then (Kafka's log saw-tooths by a segment per partition)."""
    last = samples[-1]
    mid = min(samples, key=lambda s: abs(s["t"] - last["t"] / 2))
    half_published = last["published"] - mid["published"]
    grew = last["retained"] - mid["retained"]
    rss_grew = last["rss_mib"] - mid["rss_mib"]
    half_mib = last["published_mib"] - mid["published_mib"]
    return {"end": last, "bounded": bool(grew <= 0.1 * half_published),
            "retained_mib_end": last["retained"] * record_bytes / MIB,
            "second_half_growth": grew / max(half_published, 1.0),
            "rss_mib_per_published_mib": rss_grew / max(half_mib, 1e-9)}


def _cpu(pid: int) -> float:
    return cpu_seconds([p.pid for p in tree(pid)])


def _memory(pid: int) -> tuple[float, float]:
    procs = tree(pid)
    return sum(p.rss_kib for p in procs) / 1024, sum(pss_kib(p.pid) for p in procs) / 1024


def _du(path: Path) -> int:
    """Bytes allocated on disk under `path` (as du counts them)."""
    total = 0
    for parent, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(parent, f)).st_blocks * 512
            except OSError:  # a segment deleted while walking
                pass
    return total


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the broker's process group, SIGKILL it if it is still there after 20 s."""
    for sig, wait_s in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            continue
    try:  # anything of the group left once the leader is gone
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _ratio(k: float, t: float) -> str:
    return f"{k / t:.2f}" if t > 0 else "-"


def _report(rep: Report, results: dict[str, dict[str, Any]], idle_s: int, load_s: int) -> None:
    k, t = results["kafka"], results["tansu"]
    ke, te = k["end"], t["end"]
    mib = k["record_bytes"] * RATE * load_s / MIB

    def bounded(r: dict[str, Any]) -> str:
        return "bounded" if r["bounded"] else "NOT bounded"
    rep.target("embedded broker start: launch → events topic (2 partitions, retention) created, a publish acknowledged",
               "measured side by side (no target set)",
               f"Kafka {k['start_s']:.1f} s (log formatted first), Tansu {t['start_s']:.1f} s "
               f"(Kafka/Tansu {_ratio(k['start_s'], t['start_s'])})", None)
    rep.target(f"embedded broker idle ({idle_s} s, no clients): CPU, RSS, PSS", "measured side by side (no target set)",
               f"Kafka {k['idle_cpu_pct']:.2f} % of a core, {k['idle_rss_mib']:.0f} MiB RSS, {k['idle_pss_mib']:.0f} MiB "
               f"PSS; Tansu {t['idle_cpu_pct']:.2f} %, {t['idle_rss_mib']:.0f} MiB, {t['idle_pss_mib']:.0f} MiB "
               f"(Kafka/Tansu CPU {_ratio(k['idle_cpu_pct'], t['idle_cpu_pct'])}, "
               f"PSS {_ratio(k['idle_pss_mib'], t['idle_pss_mib'])})", None)
    rep.target(f"embedded broker under {RATE} registrations/s (100 topics each) for {load_s // 60} min: the log "
               "bounded by the topic's retention", "the log's retained records stop growing",
               f"Kafka {bounded(k)} ({ke['retained']:,.0f} records retained, {ke['disk_mib']:.0f} MiB on disk, "
               f"{ke['rss_mib']:.0f} MiB RSS at the end); Tansu {bounded(t)} ({te['retained']:,.0f} records, "
               f"{te['rss_mib']:,.0f} MiB RSS) of {k['published']:,} / {t['published']:,} published",
               bool(k["bounded"]))
    default = "kafka" if k["bounded"] and not t["bounded"] else None
    rep.target("embedded default chosen by measurement (NAMESRV_KAFKA_EMBEDDED)",
               "the broker that bounds its log, the cheaper if both do",
               (f"kafka: the only one whose log stays bounded; it costs {k['load_cpu_pct']:.0f} vs "
                f"{t['load_cpu_pct']:.0f} % of a core under the load and {k['idle_pss_mib']:.0f} vs "
                f"{t['idle_pss_mib']:.0f} MiB PSS idle" if default else
                f"no clear choice: Kafka {bounded(k)}, Tansu {bounded(t)}"), default is not None)
    rows = [
        ("start: launch → topic created, first publish acknowledged", "start_s", "{:.1f} s"),
        (f"idle CPU ({idle_s} s after a {SETTLE_S} s settle), % of a core", "idle_cpu_pct", "{:.2f}"),
        ("idle RSS", "idle_rss_mib", "{:.0f} MiB"),
        ("idle PSS", "idle_pss_mib", "{:.0f} MiB"),
        (f"CPU under the load ({RATE} registrations/s), % of a core", "load_cpu_pct", "{:.1f}"),
    ]
    table = [f"| | {NAMES['kafka']} | {NAMES['tansu']} | Kafka/Tansu |", "|---|---|---|---|"]
    for label, key, fmt in rows:
        table.append(f"| {label} | {fmt.format(k[key])} | {fmt.format(t[key])} | {_ratio(k[key], t[key])} |")
    for label, key, fmt in (("RSS at the end of the load", "rss_mib", "{:,.0f} MiB"),
                            ("PSS at the end of the load", "pss_mib", "{:,.0f} MiB"),
                            ("on disk at the end (du of the log directory)", "disk_mib", "{:,.0f} MiB"),
                            ("log retained at the end (end − beginning offsets)", "retained", "{:,.0f} records")):
        table.append(f"| {label} | {fmt.format(ke[key])} | {fmt.format(te[key])} | "
                     f"{_ratio(ke[key], te[key]) if te[key] else '-'} |")
    table += [
        f"| the same in bytes (× {k['record_bytes']:,.0f} B a record) | {k['retained_mib_end']:,.0f} MiB | "
        f"{t['retained_mib_end']:,.0f} MiB | {_ratio(k['retained_mib_end'], t['retained_mib_end'])} |",
        f"| first offset still held at the end (both partitions) | {ke['first_offset']:,.0f} | "
        f"{te['first_offset']:,.0f} | - |",
        f"| retained log growth over the load's second half, ÷ records published then | "
        f"{k['second_half_growth']:.2f} | {t['second_half_growth']:.2f} | - |",
        f"| RSS growth over the second half, MiB per MiB published | {k['rss_mib_per_published_mib']:.2f} | "
        f"{t['rss_mib_per_published_mib']:.2f} | - |",
        f"| records published (of {RATE * load_s:,}) | {k['published']:,} | {t['published']:,} | - |",
    ]
    verdict = []
    for name, r in (("Apache Kafka", k), ("Tansu", t)):
        e = r["end"]
        if r["bounded"]:
            verdict.append(f"**{name} applies the retention**: its log stopped growing at about "
                           f"{r['retained_mib_end']:,.0f} MiB ({e['retained']:,.0f} records; the {e['first_offset']:,.0f} "
                           f"before them deleted) while {e['published_mib']:,.0f} MiB were published; "
                           f"it ends with {e['disk_mib']:,.0f} MiB on disk and {e['rss_mib']:,.0f} MiB RSS.")
        else:
            verdict.append(f"**{name} does not apply it**: it keeps every record ({e['retained']:,.0f} retained "
                           f"of {e['published']:,.0f} published, from offset {e['first_offset']:,.0f}), and its RSS "
                           f"grows with them, {r['rss_mib_per_published_mib']:.2f} MiB per MiB published over the "
                           f"second half, to {e['rss_mib']:,.0f} MiB at the end: it grows until the process stops "
                           "or the machine runs out of memory.")
    rep.section("The embedded broker", [
        "The two brokers `./run.sh` can embed (ops/embedded_kafka.py, NAMESRV_KAFKA_EMBEDDED), one after the other in "
        "the same run on 127.0.0.1. Start: from launch (Kafka formats its log directory first, as on a first "
        f"start) until the events topic exists ({PARTITIONS} partitions, the configuration "
        "eventlog.topics.retention_configs gives) and a first registration is acknowledged. Idle: CPU of the "
        f"broker's processes over {idle_s} s with no client connected, after a {SETTLE_S} s settle. Load: "
        f"{RATE} registrations/s of {TOPICS_PER_BROKER} topics each ({k['record_bytes']:,.0f} bytes a record, "
        f"what a {FLEET:,} × {TOPICS_PER_BROKER} fleet sends every 30 s; {mib:,.0f} MiB over {load_s // 60} min), to "
        "a topic whose retention must act within the run: NAMESRV_KAFKA_RETENTION_BYTES 32 MiB a partition, "
        "NAMESRV_KAFKA_SEGMENT_BYTES 4 MiB, NAMESRV_KAFKA_RETENTION_MS 120,000, and Kafka's retention check every "
        f"{RETENTION_CHECK_MS // 1000} s (./run.sh checks every minute). Sampled every {SAMPLE_S:.0f} s; the log's "
        "size is end − beginning offsets summed over partitions (Tansu reports the end as its last batch's base "
        "offset + 1: a few records short). Bounded = the retained records grew by at most a tenth of what was "
        "published over the load's second half.", "",
        *table, "", verdict[0], "", verdict[1], "",
        "Kafka's bytes on disk exceed its retained log by the segments past retention it has renamed `.deleted` "
        "and removes a minute later (`file.delete.delay.ms`), the open segments and the metadata log; all are "
        "bounded. Memory and log size over the load, both brokers (docs/embedded-broker.png):", "",
        f"![The embedded brokers under load: memory, and the log on disk and retained]"
        f"({PLOT.relative_to(ROOT).as_posix()})"])


def _plot(results: dict[str, dict[str, Any]], path: Path) -> None:
    """Memory, and the log's size (on disk and as offsets report it), over the load, both brokers."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (mem, log) = plt.subplots(2, 1, figsize=(7, 6.4), dpi=110, sharex=True)
    colours = {"kafka": "tab:blue", "tansu": "tab:orange"}
    for name, r in results.items():
        s = r["samples"]
        ts = [x["t"] for x in s]
        c = colours[name]
        label = "Kafka" if name == "kafka" else "Tansu"
        mem.plot(ts, [x["rss_mib"] for x in s], "-", color=c, marker="o", markersize=3, label=f"{label} RSS")
        mem.plot(ts, [x["pss_mib"] for x in s], "--", color=c, label=f"{label} PSS")
        log.plot(ts, [x["retained"] * r["record_bytes"] / MIB for x in s], "-", color=c, marker="o", markersize=3,
                 label=f"{label}: log retained (offsets × record size)")
        if name == "kafka":
            log.plot(ts, [x["disk_mib"] for x in s], "--", color=c, label="Kafka: on disk (du)")
    first = next(iter(results.values()))["samples"]
    log.plot([x["t"] for x in first], [x["published_mib"] for x in first], ":", color="grey", label="published")
    mem.set_ylabel("MiB")
    mem.set_title(f"The embedded brokers under {RATE} registrations/s (100 topics each)")
    log.set_ylabel("MiB")
    log.set_xlabel("seconds into the load")
    for ax in (mem, log):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
