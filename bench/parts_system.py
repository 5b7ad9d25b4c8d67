"""Parts that run the whole system on this machine: freshness, expiry, restart and start-up
(system), ingestion, serving, the offline sweep, memory, scale and the standalone cluster."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import load, probes, pure, timeline
from bench.report import LARGE_FLEET, ROOT, TIMELINES, Report
from bench.system import System, cpu_seconds
from conf import load_config


def system_benchmarks(rep: Report, quick: bool) -> None:
    groups = 1000
    timelines: dict[str, list[tuple[str, int, int]]] = {}
    with System(via_run_sh=True) as s:
        assert s.ready_s is not None and s.ready_ms is not None
        timelines["startup"] = timeline.startup_timeline(s, s.started_ms, s.ready_ms)
        rep.raw["ready_s"] = s.ready_s
        rep.raw["heartbeat_defer_ms"] = s.cfg.heartbeat_defer_ms
        rep.target("`./run.sh` → ready (set-up done: virtualenv and jars present)", "≤ 10 s",
                   f"{s.ready_s:.1f} s to /readyz 200 (Kafka, job's first batch, a cut served)", s.ready_s <= 10)
        fleet = probes.Fleet(s, groups, period_s=30.0)
        s.wait_consumed()
        fleet.start()
        time.sleep(5)
        disk0, cuts0 = s.disk_bytes(), sum(s.metric("namesrv_job_snapshots_committed_total"))
        # Idle first: the probes below leave brokers that expire later, which is work, not idling.
        idle = probes.idle_cost(s, 60 if quick else 180)  # spans a 60 s broker_live flush window
        rep.raw["idle"] = idle
        rep.target("idle cost, 1,000 quiet brokers (30 s heartbeats), default trigger", "≤ 5 % of one core",
                   f"{idle['core_pct']:.1f} % of one core over {idle['seconds']} s (driver + JVM + Python workers)",
                   idle["core_pct"] <= 5)
        f = probes.freshness(s, 20 if quick else 60)
        rep.raw["freshness"] = f
        timelines["registration"] = timeline.registration_timeline(s)
        rep.target("freshness, REGISTER_BROKER → route served, 1,000 groups heartbeating", "p50 ≤ 0.5 s, p99 ≤ 1 s",
                   f"p50 {f['p50_s']:.2f} s, p99 {f['p99_s']:.2f} s (n={f['n']}, max {f['max_s']:.2f} s)",
                   f["p50_s"] <= 0.5 and f["p99_s"] <= 1.0)
        e = probes.expiry(s, 10 if quick else 30)
        rep.raw["expiry"] = e
        timelines["expiry"] = timeline.expiry_timeline(s)
        rep.target("expiry overshoot, removal served − (last sign of life + timeout)", "p50 ≤ 0.5 s, max ≤ 1 s",
                   f"p50 {e['p50_s']:.2f} s, max {e['max_s']:.2f} s (n={e['n']}, timeout {e['timeout_ms']} ms)",
                   e["p50_s"] <= 0.5 and e["max_s"] <= 1.0)
        cuts = sum(s.metric("namesrv_job_snapshots_committed_total")) - cuts0
        rep.raw["delta_bytes_per_cut"] = (s.disk_bytes() - disk0) / max(1, cuts)
        rep.raw["delta_cuts"] = cuts
        cold = probes.restart(s, 1 if quick else 2)
        rep.raw["restart"] = cold
        time.sleep(62)  # past the launcher's backoff reset: a first restart again
        timelines["restart"] = timeline.restart_timeline(s)
        fleet.stop()
    with System(NAMESRV_JOB_STANDBY="true") as s:  # the same, with a warm standby job
        fleet = probes.Fleet(s, groups, period_s=30.0)
        s.wait_consumed()
        fleet.start()
        time.sleep(45)  # the standby's session is up and its Python workers warm
        before = s.rss_mib()
        sb = probes.restart(s, 1 if quick else 2)
        time.sleep(62)  # the killed job is back as the new standby, warm
        timelines["takeover"] = timeline.restart_timeline(s)
        fleet.stop()
    rep.raw["restart_standby"] = sb
    rep.raw["timelines"] = timelines
    lines = ["Where the time of one change goes, phase by phase (bench/timeline.py; the job's own records of its "
             "start and of the batch that served the change, `_job.json` and `_progress.json`). Drawn in "
             "docs/timeline-*.png; docs/latency.md reads them.", ""]
    for name, title in TIMELINES.items():
        if name in timelines:
            lines += [*timeline.text(title, timelines[name]), ""]
            timeline.draw(title, timelines[name], ROOT / "docs" / f"timeline-{name}.png")
    rep.section("Timelines", lines[:-1])
    jobs = sum(before.get(k, 0.0) for k in ("job", "job-jvm", "py-worker"))
    rep.target("job SIGKILLed → a new registration served (1,000 groups heartbeating), the default (cold restart)",
               "≤ 8 s", f"p50 {cold['p50_s']:.1f} s, max {cold['max_s']:.1f} s (n={cold['n']}; launcher restart, JVM "
               "and SparkSession from the class archive, query start, first batch, one refresh)", cold["max_s"] <= 8)
    rep.target("the same with NAMESRV_JOB_STANDBY (hot standby)", "≤ 3 s",
               f"p50 {sb['p50_s']:.1f} s, max {sb['max_s']:.1f} s (n={sb['n']}; the standby takes the lease, fences "
               f"the tables, starts its query and runs a first batch; both jobs together {jobs:.0f} MiB RSS)",
               sb["max_s"] <= 3)


def ingestion_benchmark(rep: Report, quick: bool) -> None:
    """The highest heartbeat rate whose backlog stays flat, 1,000 registered groups."""
    groups = 1000
    with System() as s:
        probes.register_fleet(s, groups, 2)
        s.wait_consumed()
        rates = [1000, 3000, 5000] if quick else [1000, 2000, 3000, 4000, 5000, 6000, 8000, 10_000, 15_000, 20_000]
        steps = probes.ramp(s, groups, rates, 30 if quick else 45)
        rep.raw["ingestion"] = steps
        best = probes.best_rate(steps)
        rep.target("sustained heartbeat ingestion, flat consumer lag", "≥ 20,000 events/s",
                   f"{best:,} events/s sustained (highest step that kept lag flat)", best >= 20_000)
        rep.section("Ingestion ramp", [
            "Heartbeats from the 1,000 registered groups at each offered rate; lag = records published but not "
            "yet consumed by a committed batch, sampled every second. Heartbeats may wait up to "
            f"NAMESRV_HEARTBEAT_DEFER_MS ({load_config({}).heartbeat_defer_ms / 1000:.0f} s) for a batch, or until a "
            "full batch (5,000) waits, so the backlog is a saw-tooth; flat = the last third's peak exceeds the middle "
            "third's by at most "
            "half of it or two seconds of input, and the publisher kept the offered rate.", "",
            "| offered/s | achieved/s | max lag | peak, middle third | peak, last third | drain after | flat |",
            "|---|---|---|---|---|---|---|"] + [
            f"| {r['rate']:,} | {r['achieved']:,} | {r['max_lag']:,} | {r['mid_lag']:,} | {r['late_lag']:,} | "
            f"{_drain(r)} | {'yes' if r['sustained'] else 'no'} |" for r in steps])


def _drain(r: dict[str, Any]) -> str:
    return "not within 15 s" if r["drain_s"] is None else f"{r['drain_s']:.1f} s"


def serving_benchmarks(rep: Report, quick: bool) -> None:
    topics = 100_000
    seconds = 10 if quick else 30
    with System() as s:
        table = {f"Topic-{i}": load_topic(i) for i in range(topics)}
        from schemas import events as ev
        t0 = time.monotonic()
        s.publish([ev.register_broker_event(cluster="BenchCluster", broker_name="huge", broker_id=0,
                                            addr="127.0.0.1:40911", topics=table)])
        served = probes.wait_topic(s, f"Topic-{topics - 1}", 600)
        rep.raw["large_registration_s"] = time.monotonic() - t0
        rep.target("largest single broker registration", "100,000 topics registered and served",
                   f"100,000 topics served {time.monotonic() - t0:.1f} s after publishing (chunked)", True)
        del served
        sample = [f"Topic-{i}" for i in range(0, topics, max(1, topics // 5000))]
        http_pids = s.pids("http")
        c0, w0 = cpu_seconds(http_pids), time.monotonic()
        ours = load.wrk(s.url, load.route_script(sample), connections=64, threads=2, seconds=seconds)
        http_core = (cpu_seconds(http_pids) - c0) / (time.monotonic() - w0)
        rep.raw["http_lookups_per_core_s"] = ours["rps"] / max(http_core, 1e-6)
        rep.raw["http_server_cores_saturated"] = http_core
        rep.raw["wrk_routes"] = {k: v for k, v in ours.items() if k != "raw"}
        paced = load.wrk(s.url, load.route_script(sample, delay_ms=7), connections=64, threads=2, seconds=seconds)
        rep.raw["wrk_routes_8k"] = {k: v for k, v in paced.items() if k != "raw"}
        rep.target("route lookups, 100k topics served, 64 connections (wrk, 2 threads)", "≥ 8,000 req/s, p99 ≤ 5 ms",
                   f"saturated: {ours['rps']:,.0f} req/s (p50 {ours['p50_ms']:.2f} ms, p99 {ours['p99_ms']:.2f} ms); "
                   f"paced to ~8,000 req/s: {paced['rps']:,.0f} req/s, p50 {paced['p50_ms']:.2f} ms, "
                   f"p99 {paced['p99_ms']:.2f} ms (non-2xx {ours['non2xx'] + paced['non2xx']})",
                   ours["rps"] >= 8000 and (paced["p99_ms"] or 1e9) <= 5 and paced["rps"] >= 7000)
    etcd = load.Etcd()
    try:
        keys = [f"/topics/Topic-{i}" for i in range(2000)]
        for k in keys:
            etcd.put(k, json.dumps({"queueDatas": [load_topic(0)]}))
        theirs = load.wrk(etcd.url, etcd.range_script(keys), connections=64, threads=2, seconds=seconds)
        rep.raw["wrk_etcd"] = {k: v for k, v in theirs.items() if k != "raw"}
        lease = load.etcd_lease_expiry(etcd, 10 if quick else 30)
        rep.raw["etcd_lease"] = lease
    finally:
        etcd.close()
    ours_exp = rep.raw.get("expiry")
    lines = ["etcd 3 (Debian `etcd-server`) on 127.0.0.1, started by the bench, in the same run:", "",
             "| | namesrv (this) | etcd | ratio namesrv/etcd |", "|---|---|---|---|",
             f"| reads/s, 64 connections (wrk; our route lookup vs etcd `/v3/kv/range` of one key) | "
             f"{ours['rps']:,.0f} | {theirs['rps']:,.0f} | {ours['rps'] / max(theirs['rps'], 1):.2f} |",
             f"| read p99 | {ours['p99_ms']:.2f} ms | {theirs['p99_ms']:.2f} ms | "
             f"{(ours['p99_ms'] or 0) / max(theirs['p99_ms'] or 1e-9, 1e-9):.2f} |"]
    if ours_exp:
        ours_total = ours_exp["timeout_ms"] / 1000 + ours_exp["p50_s"]
        theirs_total = lease["ttl_s"] + lease["p50_s"]
        lines.append(f"| silent member removed, seconds after its last heartbeat / keep-alive, median (timeout = TTL "
                     f"= 5 s) | {ours_total:.2f} s (overshoot {ours_exp['p50_s']:.2f} s) | {theirs_total:.2f} s "
                     f"(overshoot {lease['p50_s']:.2f} s) | {ours_total / theirs_total:.2f} |")
    lines += ["", "Expiry: one lease per key with TTL 5 s, one keep-alive each (timed per key, after etcd "
              "answered it), then silence; observed by polling the key every 20 ms. Ours: brokers registered "
              "with heartbeatTimeoutMillis 5,000, one heartbeat, then silence; observed on their routes. The "
              "ratio compares whole detection times; etcd's overshoot alone is near zero (it revokes on a "
              "500 ms tick), so a ratio of overshoots would mean nothing."]
    rep.section("Side by side with etcd", lines)


def load_topic(i: int) -> dict[str, Any]:
    from schemas import events as ev
    return ev.topic_config(f"Topic-{i}", read=8, write=8)


def offline_benchmarks(rep: Report, quick: bool) -> None:
    r = pure.snapshot_refresh(10_000, 100)
    rep.raw["refresh"] = r
    rep.target("snapshot refresh, 1M queue rows (10,000 groups × 100 topics)", "≤ 500 ms, lookups never blocked",
               f"{r['refresh_ms']:.0f} ms (best of 4, worst {r['refresh_ms_max']:.0f} ms); worst lookup during "
               f"a refresh {r['worst_lookup_ms']:.2f} ms over {r['lookups_during']:,} lookups",
               r["refresh_ms"] <= 500 and r["worst_lookup_ms"] < 50)
    sweep = [(10, 10), (100, 10), (1000, 10), (10000, 10), (10, 1000), (100, 1000), (1000, 1000), (10, 100_000)]
    if quick:
        sweep = [(10, 10), (1000, 10), (10000, 10), (100, 1000), (10, 100_000)]
    rows = []
    rep.raw["sweep"] = []
    for groups, topics in sweep:
        c = pure.step_costs(groups, topics, sample=200 if topics <= 1000 else 3)
        rep.raw["sweep"].append({"groups": groups, "topics": topics, **c})
        rows.append(f"| {groups:,} | {topics:,} | {c['register_ms_per_group']:.2f} | {c['heartbeat_ms_per_group']:.3f} | "
                    f"{c['heartbeat_round_s']:.3f} | {c['state_bytes']:,} |")
    rep.section("Scale sweep: the state step per group (pure function, no Spark)", [
        "CPU per call of the step (decode records, apply, encode state and rows), with the state handed over in "
        "its stored form as Spark does. A heartbeat's cost does not grow with the topic count: the topic table "
        "stays encoded unless an event needs it.", "",
        "| groups | topics per group | register ms/group | heartbeat ms/group | one heartbeat round, s | state bytes/group |",
        "|---|---|---|---|---|---|"] + rows)
    buckets = [(30, 10, 30), (300, 10, 100), (3_000, 10, 100), (3_000, 100, 100)]
    if quick:
        buckets = buckets[:3]
    rows = []
    rep.raw["bucket_calls"] = []
    for groups, topics, signals in buckets:
        c = pure.bucket_costs(groups, topics, signals)
        rep.raw["bucket_calls"].append(c)
        rows.append(f"| {groups:,} | {topics:,} | {signals} | {c['live_table_ms_per_call']:.1f} / {c['rules_ms_per_call']:.1f} | "
                    f"{c['live_table_us_per_signal']:.0f} / {c['rules_us_per_signal']:.0f} | "
                    f"{c['rules_ms_per_call'] / c['live_table_ms_per_call']:.1f}× | {c['state_bytes']:,} |")
    rep.section("A bucket's call: liveness signals absorbed by its live table, or run through the rules (pure, no Spark)", [
        "One call of the stateful step's bucket (`pipelines/buckets.py`) with a batch of small repeats, a default "
        "fleet's re-registrations as the front publishes them: absorbed in one pass by the bucket's columnar live "
        "table (`liveness/hot.py`), against every group through its route rules (its core decoded, applied, encoded: "
        "the bucket before its live table). CPU of the whole call, median of 5, the state handed over as Spark stores "
        "it. A bucket holds the fleet ÷ `NAMESRV_STATE_BUCKETS` (32) groups: 3,000 is a 100,000-broker fleet.", "",
        "| groups in the bucket | topics per group | signals in the call | ms per call, live table / rules | "
        "µs per signal, live table / rules | rules ÷ live table | bucket state, bytes |",
        "|---|---|---|---|---|---|---|"] + rows)


def memory_benchmark(rep: Report, quick: bool) -> None:
    """RSS over all processes with many groups registered and heartbeating, once per state store
    provider (the default decides the target row; the other is the comparison behind it)."""
    groups, topics = (2000, 100) if quick else (10_000, 100)
    results: dict[str, dict[str, Any]] = {}
    for store in ("hdfs", "rocksdb"):
        with System(NAMESRV_STATE_STORE=store) as s:
            t0 = time.monotonic()
            cpu0 = s.job_cpu()
            probes.register_fleet(s, groups, topics)
            s.wait_consumed(timeout_s=900)
            probes.wait_topic(s, f"BenchTopic-{groups - 1}-{topics - 1}", 300)
            applied_s = time.monotonic() - t0
            register_cpu_s = s.job_cpu() - cpu0
            state_bytes = s.disk_bytes("checkpoint")
            warehouse_bytes = s.disk_bytes()
            fleet = probes.Fleet(s, groups, period_s=30.0, register=False).start()
            c0, w0 = s.job_cpu(), time.monotonic()
            peak: dict[str, float] = {}
            peak_rss: dict[str, float] = {}
            for _ in range(6 if quick else 12):
                time.sleep(5)
                now, now_rss = s.pss_mib(), s.rss_mib()
                if sum(now.values()) > sum(peak.values()):
                    peak = now
                if sum(now_rss.values()) > sum(peak_rss.values()):
                    peak_rss = now_rss
            cpu_pct = 100 * (s.job_cpu() - c0) / (time.monotonic() - w0)
            fleet.stop()
            restarts = s.job_exits()
        results[store] = {"pss_mib": peak, "rss_mib": peak_rss, "applied_s": applied_s, "heartbeat_cpu_pct": cpu_pct,
                          "job_exits": restarts,
                          "register_cpu_ms_per_topic": 1000 * register_cpu_s / (groups * topics),
                          "checkpoint_bytes_per_group": state_bytes / groups,
                          "warehouse_bytes_per_queue_row": warehouse_bytes / (groups * topics)}
        print(f"    {store}: {results[store]}", flush=True)
    rep.raw["memory"] = {"groups": groups, "topics": topics, **results}
    default = load_config({}).state_store
    peak = results[default]["pss_mib"]
    total, rss_total = sum(peak.values()), sum(results[default]["rss_mib"].values())
    detail = ", ".join(f"{k} {v:.0f}" for k, v in sorted(peak.items(), key=lambda kv: -kv[1]) if v >= 1)
    # PSS: each shared page counted once over all processes. The RSS sum (the first round's
    # measure) counts the shared libraries and the JVM's class archive once per process.
    rep.target(f"memory, {groups:,} groups × {topics} topics{' (quick: fewer groups)' if quick else ''}, all "
               "processes (job, Spark's JVM and Python workers, HTTP, remoting front, Kafka)",
               "≤ 2 GiB over all processes", f"{total / 1024:.2f} GiB peak PSS ({detail} MiB; state store {default}); "
               f"RSS summed per process {rss_total / 1024:.2f} GiB; "
               f"registered and served in {results[default]['applied_s']:.0f} s; job exits during the run: "
               f"{', '.join(results[default]['job_exits']) or 'none'}", total <= 2048)
    rep.section("State store providers", [
        f"{groups:,} groups × {topics} topics registered, then heartbeating every 30 s; same run, one system each.", "",
        "| provider | register + serve all | peak PSS, all processes (RSS summed) | job CPU while heartbeating |",
        "|---|---|---|---|"] + [
        f"| {name}{' (default)' if name == default else ''} | {r['applied_s']:.0f} s | "
        f"{sum(r['pss_mib'].values()) / 1024:.2f} GiB ({sum(r['rss_mib'].values()) / 1024:.2f}; job JVM "
        f"{r['pss_mib'].get('job-jvm', 0):.0f} MiB) | {r['heartbeat_cpu_pct']:.1f} % of a core |" for name, r in results.items()])


def scale_benchmark(rep: Report, quick: bool) -> None:
    """The largest fleet of the targets: 100,000 broker groups × 10 topics registered, then
    heartbeating every 30 s (3,333 heartbeats/s, each of another group). Bounded: registration
    gets 15 minutes, the heartbeat window is fixed; what was not served in time is reported."""
    groups, topics = (20_000, 10) if quick else (100_000, 10)
    window = 60 if quick else 120
    # The defaults (HDFS-backed state in a 1 GiB driver heap) ran out of heap near 100,000 groups
    # and crash-looped; RocksDB keeps the state off the heap, and the heap gets room for batches.
    settings = LARGE_FLEET
    # Registered with a 15-minute broker timeout: the wave takes minutes to apply, and with the
    # default 120 s the first groups would time out before the heartbeats (the load measured
    # after it) begin; each batch would then call every timed-out group again while the log's
    # backlog forbids expiring it (the 100,000-group run of round 2 spent its CPU there).
    timeout_ms = 900_000
    with System(via_run_sh=False, **settings) as s:
        cpu0, t0 = s.job_cpu(), time.monotonic()
        probes.register_fleet(s, groups, topics, timeout_ms=timeout_ms)
        published_s = time.monotonic() - t0
        try:
            s.wait_consumed(timeout_s=900)
            probes.wait_topic(s, f"BenchTopic-{groups - 1}-{topics - 1}", 300)
            registered_s: float | None = time.monotonic() - t0
        except TimeoutError as exc:
            registered_s = None
            print(f"    registration not served in time: {exc}", flush=True)
        register_cpu = s.job_cpu() - cpu0
        exits = s.job_exits()
        result: dict[str, Any] = {"job_exits": exits, "groups": groups, "topics": topics, "published_s": published_s,
                                  "registered_s": registered_s, "register_cpu_s": register_cpu, "settings": settings}
        if registered_s is not None:
            fleet = probes.Fleet(s, groups, period_s=30.0, register=False).start()
            sent0, cpu1, w1 = s.sent, s.job_cpu(), time.monotonic()
            lags: list[int] = []
            peak: dict[str, float] = {}
            while time.monotonic() - w1 < window:
                time.sleep(5)
                lags.append(s.lag())
                now = s.pss_mib()
                if sum(now.values()) > sum(peak.values()):
                    peak = now
            offered = (s.sent - sent0) / (time.monotonic() - w1)
            cpu_pct = 100 * (s.job_cpu() - cpu1) / (time.monotonic() - w1)
            served_lag = s.served_lag_s()
            fleet.stop()
            third = max(1, len(lags) // 3)
            middle, last = lags[third:2 * third] or [0], lags[2 * third:] or [0]
            # Heartbeats wait up to NAMESRV_HEARTBEAT_DEFER_MS, so a job that keeps up shows a
            # saw-tooth; it falls behind when the troughs rise (by more than 2 s of input).
            flat = min(last) - min(middle) <= 2 * offered
            result.update(offered_per_s=offered, lags=lags, flat=flat, heartbeat_cpu_pct=cpu_pct,
                          served_lag_s=served_lag, pss_mib=peak)
    rep.raw["scale"] = result
    if registered_s is None:
        rep.target(f"{groups:,} broker groups × {topics} topics registered, heartbeating every 30 s",
                   "served, lag flat", f"not served within 15 min of publishing ({register_cpu:.0f} s of job CPU "
                   f"spent; the job exited {len(exits)} time(s), codes {', '.join(exits) or '-'})", False)
        return
    pss = sum(result["pss_mib"].values()) / 1024
    rep.target(f"{groups:,} broker groups × {topics} topics registered, heartbeating every 30 s", "served, lag flat",
               f"with {', '.join(f'{k}={v}' for k, v in settings.items())} and a {timeout_ms // 60_000}-minute "
               "broker timeout: registered and served in "
               f"{registered_s:.0f} s; then {result['offered_per_s']:,.0f} heartbeats/s for "
               f"{window} s: lag {'flat' if result['flat'] else 'growing'} (sampled every 5 s: "
               f"{', '.join(f'{x:,}' for x in result['lags'][::max(1, len(result['lags']) // 6)])}; served cut "
               f"{result['served_lag_s']:.0f} s behind at the end), job {result['heartbeat_cpu_pct']:.0f} % of a core, "
               f"memory {pss:.2f} GiB (PSS, all processes)", bool(result["flat"]))


def cluster_benchmark(rep: Report, quick: bool) -> None:
    """The job on Spark's standalone cluster with 1 and with 2 workers (1 core, 1 GiB each), the
    same fleet and ramp as the system part: what distributing the stateful stage buys or costs
    on this machine (2 cores shared by the driver, the workers' executors, Kafka and the load)."""
    from ops.procs import tree
    from ops.standalone import start_cluster
    groups = 1000
    rates = [1000, 3000] if quick else [1000, 2000, 3000, 4000]
    results: dict[int, dict[str, Any]] = {}
    for workers in (1, 2):
        scratch = Path(tempfile.mkdtemp(prefix="namesrv-bench-cluster-"))
        cluster = start_cluster(scratch, workers=workers, cores=1, memory="1g")
        try:
            with System(NAMESRV_SPARK_MASTER=cluster.master_url, PYSPARK_PYTHON=sys.executable) as s:
                fleet = probes.Fleet(s, groups, period_s=30.0)
                s.wait_consumed(timeout_s=300)
                fleet.start()
                time.sleep(5)
                roots = [s.launcher_pid(), *(c.pid for c in cluster.procs)]

                def everything(roots: list[int] = roots) -> float:
                    return cpu_seconds([p.pid for root in roots for p in tree(root)])
                c0, w0 = everything(), time.monotonic()
                time.sleep(60 if quick else 90)
                idle = 100 * (everything() - c0) / (time.monotonic() - w0)
                fresh = probes.freshness(s, 10 if quick else 15)
                fleet.stop()
                s.wait_consumed(timeout_s=300)
                steps = probes.ramp(s, groups, rates, 30 if quick else 40, f"{workers} worker(s), ")
        finally:
            cluster.stop()
            shutil.rmtree(scratch, ignore_errors=True)
        best = probes.best_rate(steps)
        results[workers] = {"idle_pct": idle, "freshness": fresh, "ingestion": steps, "best": best}
    rep.raw["cluster"] = {str(k): v for k, v in results.items()}
    local = rep.raw.get("idle", {}).get("core_pct")
    rep.section("Standalone cluster: 1 and 2 workers", [
        f"The job with NAMESRV_SPARK_MASTER pointing at a standalone cluster on this machine (master + workers of 1 "
        f"core and 1 GiB each); {groups:,} groups heartbeating every 30 s, then the ingestion ramp. Idle CPU here "
        "counts every process (driver, executors, their Python workers, the cluster's daemons, Tansu, server) "
        + (f"— the local[2] job alone idles at {local:.1f} %. " if local is not None else ". ")
        + "Two workers on two cores measure what distribution costs, not what it gains: the gain needs cores "
        "the driver and Kafka do not share (docs/scaling.md).", "",
        "| workers | idle CPU, % of one core (all processes) | freshness p50 / p99 | highest flat ingestion |",
        "|---|---|---|---|"] + [
        f"| {w} | {r['idle_pct']:.1f} | {r['freshness']['p50_s']:.2f} s / {r['freshness']['p99_s']:.2f} s | "
        f"{r['best']:,}/s |" for w, r in results.items()])


