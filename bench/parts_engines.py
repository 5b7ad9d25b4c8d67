"""Parts that compare engines inside the job: Spark's stateful APIs, the Kafka sources, the Delta
writers."""

from __future__ import annotations

import time
from typing import Any

from bench import probes
from bench.report import ROOT, Report
from bench.system import System
from conf import load_config
from ops.apache_kafka import start_kafka


def stateapi_benchmark(rep: Report, quick: bool) -> None:
    """The job's stateful operator against Spark 4's alternatives, in the job's shape (one
    heartbeat per group per batch, a ~1.5 KB state, a processing-time timeout, one output row),
    with trivial Python work: the per-group cost of each API's plumbing (bench/stateful_api.py)."""
    from bench import stateful_api as sa
    sizes = (1000,) if quick else (1000, 5000)
    results = sa.run(sizes)
    rep.raw["stateapi"] = [{k: v for k, v in r.items() if k != "per_batch"} for r in results]
    lines = ["Each API in turn in one SparkSession, 6 batches of the same keys (batch 0 creates the state and is "
             "shown apart), medians over batches 1–5. CPU counts the driver, its JVM and the Python workers.", "",
             *sa.table(results).splitlines()]
    if len(sizes) > 1:
        lines += ["", "The cost of one more group (the per-batch fixed cost cancels):", "",
                  *sa.marginal(results, sizes[0], sizes[-1]).splitlines()]
    rep.section("Stateful API: applyInPandasWithState and Spark 4's transformWithState*", lines)


def sources_benchmark(rep: Report, quick: bool) -> None:
    """Our Kafka source against Spark's connector, same fleet, same broker (Apache Kafka: the
    connector cannot read Tansu's last record batches correctly, see docs/tests.md), same run."""
    groups = 1000
    results: dict[str, dict[str, Any]] = {}
    with start_kafka() as broker:
        for source in ("python", "connector"):
            print(f"  source {source}", flush=True)
            with System(NAMESRV_KAFKA_BOOTSTRAP=broker.bootstrap, NAMESRV_KAFKA_SOURCE=source,
                        NAMESRV_KAFKA_TOPIC=f"bench-{source}") as s:
                fleet = probes.Fleet(s, groups, period_s=30.0)
                s.wait_consumed()
                fleet.start()
                time.sleep(5)
                idle = probes.idle_cost(s, 60 if quick else 120)
                fresh = probes.freshness(s, 20 if quick else 30)
                fleet.stop()
                s.wait_consumed()
                steps = probes.ramp(s, groups, [1000, 3000, 5000] if quick else [1000, 3000, 5000, 8000, 10000],
                                    30 if quick else 40)
                best = probes.best_rate(steps)
            results[source] = {"idle": idle, "freshness": fresh, "ingestion": steps, "best": best}
    rep.raw["sources"] = results
    py, co = results["python"], results["connector"]
    rep.target("Kafka source chosen by measurement (NAMESRV_KAFKA_SOURCE default)", "the better of the two on "
               "idle cost and freshness", f"python: idle {py['idle']['core_pct']:.1f} %, freshness p50 "
               f"{py['freshness']['p50_s']:.2f} s; connector: idle {co['idle']['core_pct']:.1f} %, p50 "
               f"{co['freshness']['p50_s']:.2f} s", None)
    rep.section("Kafka sources side by side: ours (kafka-python) and Spark's connector (spark-sql-kafka-0-10)", [
        f"The whole system ({groups:,} groups registered, heartbeating every 30 s) once per source, in the same "
        "run, against the same one-node Apache Kafka (the connector trusts the broker's end offsets, which the "
        "embedded Tansu misreports). Idle: CPU of the job's processes (driver, JVM, Python workers) while the "
        "fleet only heartbeats. Freshness: a new registration published → its route served. Ingestion: the "
        "highest heartbeat rate whose consumer lag stayed flat (as in the ingestion ramp above).", "",
        "| source | idle CPU, % of one core | freshness p50 / p99 | highest flat ingestion |", "|---|---|---|---|"] + [
        f"| {name} | {r['idle']['core_pct']:.1f} | {r['freshness']['p50_s']:.2f} s / {r['freshness']['p99_s']:.2f} s "
        f"| {r['best']:,}/s |" for name, r in results.items()])


def writers_benchmark(rep: Report, quick: bool) -> None:
    """One cut's write by delta-rs and by Delta for Spark, at three table sizes, same run."""
    from bench import writers
    from pipelines.job import build_spark
    cfg = load_config({"NAMESRV_DATA_DIR": str(ROOT / "data" / "bench-writers")})
    spark = build_spark(cfg, app_name="namesrv-bench-writers")
    try:
        sizes = [100, 10_000, 100_000] if quick else [100, 10_000, 1_000_000]
        results = [writers.compare(spark, n) for n in sizes]
    finally:
        spark.stop()
    rep.raw["writers"] = results
    names = ("delta-rs", "delta-spark replaceWhere", "delta-spark MERGE")
    rep.section("Delta writers side by side: one cut with delta-rs and with Delta for Spark", [
        "A cut replaces the rows of the groups a batch changed: here 1 % of the groups (100 topics each) of a "
        "`topic_queue` of the given size, as an overwrite with a predicate on the owner column (what the sink "
        "does), as Spark's `replaceWhere` overwrite, and as a Spark MERGE with the same effect. Best of 3; CPU is "
        "this process plus its Spark JVM.", "",
        "| queue rows | " + " | ".join(f"{n}: wall / CPU" for n in names) + " |", "|---|---|---|---|"] + [
        f"| {r['rows']:,} | " + " | ".join(f"{r[n]['wall_ms']:.0f} ms / {r[n]['cpu_ms']:.0f} ms" for n in names) + " |"
        for r in results])


