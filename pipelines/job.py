"""The streaming job: wiring only (readStream → applyInPandasWithState → foreachBatch).

Run with `python -m pipelines.job`; configuration comes from conf.load_config() here and is
passed down. SIGTERM/SIGINT stop the query between batches and exit quietly.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from conf import STATE_STORES, Config, jvm, load_config
from conf.logs import setup_logging
from conf.store import StorePath
from conf.version import argument_parser
from eventlog.consumer import FETCH_BYTES
from eventlog.topics import ensure_topic, retention_configs
from pipelines import class_archive, kafka_source, planner_daemons, sizing, state_layout, warm_up, writer_lease
from pipelines.buckets import Layout
from pipelines.faults import KillAtRandom
from pipelines.sink import DeltaSink
from pipelines.step import STATE_SCHEMA, StepConfig, make_step, step_input
from pipelines.step_rows import OUTPUT_SCHEMA
from schemas import tables as t
from schemas.metrics import JobMetrics

log = logging.getLogger("namesrv.job")
QUERY_NAME = "namesrv-routes"
HEAP_POLL_S = 5.0  # how often the heap watch looks for a completed batch (one call into the JVM)
# A batch that took this long is logged with where its time went (Spark's durationMs): the sink's
# own line says only its part, and at 100,000 brokers batches came 25-50 s apart, 3-15 s of each in
# the sink (by hand, 2026-11-30).
SLOW_BATCH_MS = 10_000
# What the step and the source import on an executor (pickled by reference, so shipped as code).
EXECUTOR_PACKAGES = ("conf", "schemas", "routeinfo", "liveness", "eventlog", "pipelines")


def build_spark(cfg: Config, app_name: str = "namesrv", *, driver_java_options: str | None = None,
                heap: sizing.Heap | None = None) -> Any:
    """A SparkSession for the job. Python workers must run this interpreter: a worker started
    with another Python (the system one) lacks the pinned packages and fails at import.

    The driver JVM maps the class archive `./run.sh` made at set-up (pipelines/class_archive.py)
    when there is one for this Java and these jars: Spark's start is mostly class loading.
    `driver_java_options` replaces that (the archive's own making passes its dump option).
    `heap`: the driver's heap (pipelines/sizing.py); None sizes it here from `cfg`, as the job
    does before it calls this (pyspark starts the JVM, whose heap is then fixed, right here). A
    `cfg` whose NAMESRV_SPARK_MASTER is still `auto` (the tests' session, the bench's, the class
    archive's) is resolved here too, from the same read of the fleet."""
    if heap is None or sizing.is_auto(cfg.spark_master):
        cfg, sized = size_job(cfg)
        heap = sized.heap if heap is None else heap
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # The driver's address: loopback on one machine (no hostname warning); on a driver host of a
    # Spark cluster, the host's address, which the executors connect back to.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    driver_ip = os.environ["SPARK_LOCAL_IP"]
    # pyspark's own pandas concat warns on every batch in the workers; it is not ours to fix.
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    # Fewer glibc malloc arenas in the JVM and the Python workers it forks: with one per thread,
    # freed memory stays scattered across arenas and RSS never comes down after a big batch.
    os.environ.setdefault("MALLOC_ARENA_MAX", "2")
    from pyspark.sql import SparkSession
    log4j = Path(__file__).resolve().parent.parent / "conf" / "log4j2.properties"
    # -Xss: on stop, Spark matches a regex over the interrupted Python source's traceback, which
    # overflows the default 1 MiB thread stack and prints a thousand-line StackOverflowError.
    # C1 only: every micro-batch brings freshly generated classes, so the JIT never settles, and C2
    # compiling them was half of the JVM's CPU under a quiet fleet (1,000 brokers re-registering:
    # JVM 7.0 → 3.5 % of a core; 10,000 × 100 topics registering: 104-108 s either way, JVM CPU
    # 28 → 24 s; by hand, 2026-11-25, docs/scaling.md).
    java_opts = f"-Dlog4j2.configurationFile={log4j.as_uri()} -Xss32m -XX:TieredStopAtLevel=1"
    # The collector and how the heap gives back what a wave grew it to follow the heap's size
    # (pipelines/sizing.collector_options).
    driver_opts = (f"{java_opts} {sizing.collector_options(heap)} "
                   f"{class_archive.java_options() if driver_java_options is None else driver_java_options}")
    # Delta for Spark and Spark's Kafka connector, resolved once by ./run.sh (conf/jvm.py).
    spark = (SparkSession.builder.master(cfg.spark_master).appName(app_name)
             .config(map=dict[str, Any](jvm.delta_spark_conf()))
             # Delta for Spark rebuilds a table's state with 50 shuffle partitions by default: 50
             # tasks per version read, for logs of a few kilobytes.
             .config("spark.databricks.delta.snapshotPartitions", str(cfg.shuffle_partitions))
             .config("spark.sql.shuffle.partitions", str(cfg.shuffle_partitions))
             # NAMESRV_SPARK_DRIVER_MEMORY, or with `auto` the heap sized to the fleet (pipelines/sizing.py)
             .config("spark.driver.memory", heap.size)
             .config("spark.sql.execution.arrow.pyspark.enabled", "true")
             # A registration wave's batch (5,000 groups × 100 topics) returns ~200 MB of JSON
             # rows; held uncompressed in the driver beside the state, it ran the 1 GiB heap out
             # (3 runs of 4 crash-looped on OutOfMemoryError / TaskResultLost). zstd shrinks the
             # Arrow batches between JVM and Python several times (lz4 fails on empty buffers:
             # "Lz4 compressed input contains less than one frame"), and one retained state
             # version instead of two halves what the HDFS-backed store caches on the heap.
             .config("spark.sql.execution.arrow.compression.codec", "zstd")
             .config("spark.sql.streaming.maxBatchesToRetainInMemory", "1")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.bindAddress", driver_ip)
             .config("spark.driver.host", driver_ip)
             .config("spark.driver.extraJavaOptions", driver_opts.strip())
             .config("spark.executor.extraJavaOptions", java_opts)
             .config("spark.sql.streaming.stateStore.providerClass", STATE_STORES[cfg.state_store])
             .config("spark.python.worker.reuse", "true")
             .config(map=dict[str, Any](_daemon_conf(cfg.spark_master)))
             # Spark's checkpoint (offsets, commits, state store files) without a `chmod` and a
             # `readlink` process per file: about forty forks a batch (conf/jvm.py).
             .config(map=dict[str, Any](jvm.local_fs_conf() if cfg.spark_master.startswith("local") else {}))
             .config(map=dict[str, Any](_cluster_conf(cfg)))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    if not cfg.spark_master.startswith("local"):
        # Executors elsewhere need our modules (the step and the source are pickled by reference).
        spark.sparkContext.addPyFile(str(code_archive(cfg.data_dir)))
    _quiet_accumulator_server()
    spark.dataSource.register(kafka_source.KafkaEventSource)
    spark.dataSource.register(warm_up.WarmUpSource)
    return spark


def size_job(cfg: Config, *, announce: bool = True) -> tuple[Config, sizing.JobSize]:
    """This start's master and heap (pipelines/sizing.py), from one read of the warehouse's newest
    cut, each logged with the fleet: `cfg` with a concrete master in place of `auto` (every later
    reader of cfg.spark_master sees the master the session runs), and the sizing. Raises
    ValueError for a heap Spark would refuse."""
    sized = sizing.size_job(cfg.spark_master, cfg.spark_driver_memory, cfg.warehouse, buckets=cfg.state_buckets,
                            partitions=cfg.shuffle_partitions, announce=announce)
    return dataclasses.replace(cfg, spark_master=sized.slots.master), sized


def heap_watch(cfg: Config, heap: sizing.Heap) -> sizing.HeapWatch:
    """What start_query compares the running query's state with: the heap the driver has.
    `cfg`: with the master the session runs (size_job's)."""
    return sizing.HeapWatch(heap.bytes, slots=sizing.local_slots(cfg.spark_master, sizing.host_cores()),
                            buckets=cfg.state_buckets, host_memory=sizing.host_memory_bytes())


def watch_heap(query: Any, watch: sizing.HeapWatch, metrics: JobMetrics, poll_s: float = HEAP_POLL_S,
               running_slots: int | None = None) -> None:
    """While `query` runs: after each batch it completed (looked for every `poll_s`), its state
    operators' memoryUsedBytes against the heap (pipelines/sizing.HeapWatch), in the job's gauge
    (the sink writes the metrics file at its next batch) and, once per crossing of the largest
    state the heap was sized for, a warning naming the next start's size. A poll of the last
    progress (one call into the JVM, its JSON) rather than a query listener, which converts every
    field of every progress with a call of its own. `running_slots`: the task slots the session
    runs (a local master's), exported as `namesrv_job_task_slots`."""
    metrics.driver_heap.labels("heap").set(watch.heap)
    if running_slots is not None:
        metrics.task_slots.set(running_slots)
    seen: int | None = None
    while True:
        time.sleep(poll_s)
        try:
            if not query.isActive:
                return
            progress = query.lastProgress
        except Exception:  # the session stopped under the query (a stop, a signal): nothing left to watch
            return
        if progress is None or progress.get("batchId") == seen:
            continue
        seen = progress.get("batchId")
        slow = slow_batch(progress)
        if slow is not None:
            log.info("%s", slow, extra={"batchId": seen})
        state = sizing.state_of_progress(progress)
        if state is None:
            continue
        pressure = watch.observe(state)
        metrics.driver_heap.labels("state").set(pressure.state)
        metrics.driver_heap.labels("needed").set(pressure.needed)
        if pressure.warn:
            log.warning("%s", watch.message(pressure), extra={"batchId": seen})


def slow_batch(progress: dict[str, Any], slow_ms: int = SLOW_BATCH_MS) -> str | None:
    """What a batch that took `slow_ms` or more spent its time on, from its progress (Spark's
    `durationMs` parts, largest first, and its stateful operators' update and commit times); None
    for a faster one."""
    durations = progress.get("durationMs") or {}
    total = durations.get("triggerExecution") or 0
    if total < slow_ms:
        return None
    parts = ", ".join(f"{k} {v}" for k, v in sorted(durations.items(), key=lambda kv: -kv[1])
                      if k != "triggerExecution" and v)
    ops = "; ".join(f"state rows {op.get('numRowsTotal')}, updated {op.get('numRowsUpdated')} in "
                    f"{op.get('allUpdatesTimeMs')} ms, committed in {op.get('commitTimeMs')} ms"
                    for op in progress.get("stateOperators") or [])
    return (f"batch {progress.get('batchId')} took {total} ms ({progress.get('numInputRows')} input rows): {parts}"
            + (f"; {ops}" if ops else ""))


def _cluster_conf(cfg: Config) -> dict[str, str]:
    """On a cluster, a job takes as many cores as its stateful stage has partitions: a standby's
    session (started beside the active job, to take over at once) then finds cores of its own,
    where Spark's default (every core) would leave its warm-up job waiting for the active one's."""
    return {} if cfg.spark_master.startswith("local") else {"spark.cores.max": str(cfg.shuffle_partitions)}


def _daemon_conf(master: str) -> dict[str, str]:
    """Python workers forked from a daemon that has already imported what they import
    (`pipelines/worker_daemon.py`). Local masters only: a cluster's executors import this tree
    from the code archive, which the daemon's own start cannot see."""
    return {"spark.python.daemon.module": "pipelines.worker_daemon"} if master.startswith("local") else {}


def code_archive(data_dir: Path) -> Path:
    """A zip of the packages executors import, rebuilt per start."""
    import zipfile
    root = Path(__file__).resolve().parent.parent
    data_dir.mkdir(parents=True, exist_ok=True)
    target = data_dir / "namesrv-code.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        for package in EXECUTOR_PACKAGES:
            for f in sorted((root / package).rglob("*")):
                if f.is_file() and "__pycache__" not in f.parts:
                    z.write(f, f.relative_to(root).as_posix())
    return target


def _quiet_accumulator_server() -> None:
    """A Python worker killed by query.stop() closes its accumulator socket mid-read; pyspark's
    server then prints an EOFError traceback. That is shutdown noise, not a failure."""
    import pyspark.accumulators as acc
    original = acc.AccumulatorTCPServer.handle_error
    if getattr(original, "_namesrv_quiet", False):
        return

    def handle_error(self: Any, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], EOFError):
            return
        original(self, request, client_address)

    handle_error._namesrv_quiet = True  # type: ignore[attr-defined]
    acc.AccumulatorTCPServer.handle_error = handle_error  # type: ignore[method-assign]


def start_query(spark: Any, cfg: Config, *, query_name: str = QUERY_NAME,
                fault: Callable[[str], None] | None = None, events: Any = None,
                start_phases: dict[str, int] | None = None, lease: writer_lease.Lease | None = None,
                heap: sizing.HeapWatch | None = None) -> Any:
    """Start the route query on `spark`; tables are created first so readers always find them.
    `events`: a stream with read_events' columns instead of the Kafka topic (the class archive's
    warm-up runs the query over files). `start_phases`: when the job's start-up phases ended,
    recorded for readers with the start (schemas/progress.py). `lease`: the writer's role this job
    holds (pipelines/writer_lease.py); its source and sink refuse to go on once it is taken over
    (None: tests that run one query alone). `heap`: the running query's state is compared with the
    driver's heap on a thread of its own (`watch_heap`; None: not watched)."""
    from pyspark.sql.functions import col
    from pyspark.sql.streaming.state import GroupStateTimeout

    step_cfg = StepConfig.from_config(cfg)
    layout, state_import = state_layout.prepare(spark, cfg.checkpoint_dir, cfg.state_buckets, cfg.shuffle_partitions,
                                                step_cfg.routing,
                                                can_import=events is None and cfg.kafka_source == "python")
    step_cfg = dataclasses.replace(step_cfg, layout=layout)
    sink = DeltaSink(cfg.warehouse, retention_ms=cfg.history_retention_ms,
                     maintenance_interval_ms=cfg.maintenance_interval_ms, metrics_dir=cfg.data_dir,
                     live_flush_ms=cfg.live_flush_ms, lease=lease,
                     **({"fault": fault} if fault else {}))
    sink.ensure_tables()
    sink.announce_start(start_phases)
    step = make_step(step_cfg)
    # With our source, batches run when it admits one (liveness/admission.py); Spark's own
    # no-data batches would run every trigger, because ProcessingTimeTimeout always asks for
    # another batch. Spark's connector has no admission, so it needs them for timeouts to fire.
    # The query takes the session's settings when it starts, so this is per query.
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", str(cfg.kafka_source == "connector").lower())
    out = (step_input(read_events(spark, cfg, layout, state_import, lease) if events is None else events, layout)
           .groupBy(col("key"))
           .applyInPandasWithState(step, OUTPUT_SCHEMA, STATE_SCHEMA, "append",
                                   GroupStateTimeout.ProcessingTimeTimeout))
    # Our source paces the batches itself and admits a change at once (liveness/admission.py), so
    # its query runs triggers back to back: with a processing-time interval Spark would hold a
    # change that arrived during a batch until the next multiple of the interval.
    interval_ms = cfg.trigger_interval_ms if cfg.kafka_source == "connector" else 0
    query = (out.writeStream.queryName(query_name)
             .option("checkpointLocation", str(cfg.checkpoint_dir))
             .trigger(processingTime=f"{interval_ms} milliseconds")
             .foreachBatch(sink)
             .start())
    if heap is not None:
        running = sizing.local_slots(cfg.spark_master, sizing.host_cores()) if cfg.spark_master.startswith("local") \
            else None
        threading.Thread(target=watch_heap, args=(query, heap, sink.metrics),
                         kwargs={"running_slots": running}, name="heap-watch", daemon=True).start()
    return query


def warm_python_workers(spark: Any, cfg: Config) -> None:
    """A tiny grouped pandas job over as many partitions as the query's stateful stage, which
    starts (or keeps alive) the Python workers the query will use, with pandas, pyarrow and the
    step's modules imported in them and their Kafka reader connected; and a read of a one-row
    Python data source, which starts the daemons Spark plans Python data source reads in
    (`pipelines/warm_up.py`)."""
    spark.read.format(warm_up.SOURCE_NAME).load().collect()
    from pyspark.sql.functions import col
    step = make_step(StepConfig.from_config(cfg))
    bootstrap, topic = (cfg.bootstrap, cfg.kafka_topic) if cfg.kafka_source == "python" else (None, "")

    def echo(pdf: Any) -> Any:
        # The step rides along in the closure: unpickling it imports its modules. (Not as a
        # parameter default: a function of two parameters is called with (key, pdf), and the
        # standby's warm-up failed with UDF_RETURN_TYPE, ending the standby every time.)
        assert step is not None
        if bootstrap is not None:  # and the worker's Kafka reader connected (`kafka_source.warm_reader`)
            kafka_source.warm_reader(bootstrap, topic)
        return pdf
    (spark.range(cfg.shuffle_partitions * 2, numPartitions=cfg.shuffle_partitions)
     .groupBy(col("id")).applyInPandas(echo, "id long").collect())


def _warm_quietly(spark: Any, cfg: Config) -> None:
    try:
        warm_python_workers(spark, cfg)
    except Exception as exc:  # only a head start: the first batch starts them itself if this fails
        log.info("Python workers not warmed ahead of the first batch: %s", str(exc).splitlines()[0] if str(exc) else exc)


def read_events(spark: Any, cfg: Config, layout: Layout, state_import: StorePath | None = None,
                lease: writer_lease.Lease | None = None) -> Any:
    """The events topic as a stream of (partition, offset, timestamp ms, key, value) rows, from
    our source (`python`) or Spark's Kafka connector (`connector`), with the same columns.
    `layout`: the operator's keys (`state_layout.prepare`); `state_import`: buckets' state the
    next batch hands the step first (pipelines/state_layout.py)."""
    if cfg.kafka_source == "python":
        return (spark.readStream.format(kafka_source.SOURCE_NAME)
                .option("bootstrap", cfg.bootstrap).option("topic", cfg.kafka_topic)
                .option("partitions", str(cfg.kafka_partitions))
                .option("topicConfigs", json.dumps(retention_configs(cfg)))
                .option("maxRecordsPerBatch", str(cfg.max_records_per_batch))
                .option("heartbeatDeferMs", str(cfg.heartbeat_defer_ms))
                .option("triggerIntervalMs", str(cfg.trigger_interval_ms))
                .option("fetchWaitMs", str(cfg.fetch_wait_ms))
                .option("brokerTimeoutMs", str(cfg.broker_timeout_ms))
                .option("progressDir", str(cfg.warehouse))
                .option("leaseDir", "" if lease is None else str(lease.root))
                .option("writerEpoch", "0" if lease is None else str(lease.epoch))
                .option("stateImport", "" if state_import is None else str(state_import))
                .option("stateLayout", str(layout.tag))
                .option("layoutDir", str(cfg.checkpoint_dir)).load())
    from pyspark.sql.functions import col, unix_millis
    return (spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", cfg.bootstrap).option("subscribe", cfg.kafka_topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(cfg.max_records_per_batch))
            # Sized like our source's fetches; a fetch's first batch comes whole whatever its size,
            # so oversize records arrive and are dead-lettered with their reason.
            .option("kafka.max.partition.fetch.bytes", str(FETCH_BYTES))
            .option("kafka.fetch.max.bytes", str(FETCH_BYTES))
            # A log that went backwards (the memory-only broker restarted) is read again, as our
            # source does, instead of failing the query.
            .option("failOnDataLoss", "false")
            .load()
            .select(col("partition"), col("offset"), unix_millis(col("timestamp")).alias("timestamp"),
                    col("key").cast("string").alias("key"), col("value")))


def _now_ms() -> int:
    return int(time.time() * 1000)


def _process_start_ms() -> int:
    """This process' start (epoch ms), from the kernel: ticks after boot, and the boot time from the
    uptime (10 ms steps; /proc/stat's btime has whole seconds)."""
    ticks = int(writer_lease.process_start(os.getpid()) or 0)
    boot = time.time() - float(Path("/proc/uptime").read_text().split()[0])
    return int((boot + ticks / os.sysconf("SC_CLK_TCK")) * 1000)


def _look_again_at_takeover(cfg: Config, heap: sizing.Heap) -> None:
    """A standby's heap was sized when it started, maybe long before the fleet grew: say so as it
    takes over (the heap watch warns again if the state presses it), rather than delay the
    takeover with a restart of the JVM while the routes wait."""
    if heap.source != "auto":
        return
    _, now = size_job(cfg, announce=False)
    if now.heap.bytes > heap.bytes:
        log.warning("this job stood by since its heap was sized (%s); the fleet now asks for %s, which its "
                    "next start gets", heap.size, now.heap.size)


def main(argv: list[str] | None = None) -> int:
    argument_parser("namesrv-job", "The streaming job: Kafka events -> RocketMQ's route rules -> Delta tables."
                    ).parse_args(argv)
    phases = {"process": _process_start_ms(), "main": _now_ms()}
    cfg = load_config()
    setup_logging(cfg.log_format)
    ensure_topic(cfg.bootstrap, cfg.kafka_topic, cfg.kafka_partitions, retention_configs(cfg))
    archive = class_archive.java_options()
    try:
        # before the session: pyspark starts the JVM with its heap and its task slots fixed
        cfg, sized = size_job(cfg)
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    heap = sized.heap
    try:
        spark = build_spark(cfg, driver_java_options=archive, heap=heap)
    except jvm.JarsMissing as exc:
        log.error("%s", exc)
        return 2
    phases["sessionBuilt"] = _now_ms()
    table_paths = [str(cfg.warehouse / table.name) for table in t.ALL_TABLES]
    lease = writer_lease.acquire(cfg.store_root, lambda: table_paths, lambda pid: log.info(
        "standby: job %s is the writer (%s); this job takes over the moment that one ends or stops renewing "
        "its lease for %.0f s", pid or "?", cfg.store_root / writer_lease.LEASES, writer_lease.STALE_S),
        keep_warm=lambda: warm_python_workers(spark, cfg))
    phases["leaseTaken"] = _now_ms()
    log.info("writer epoch %d: the tables carry it; an older writer can no longer commit", lease.epoch)
    if phases["leaseTaken"] - phases["sessionBuilt"] > 60_000:
        _look_again_at_takeover(cfg, heap)
    stopping = threading.Event()
    lease_stop = threading.Event()

    def _fenced(newer: int) -> None:
        # A successor took over while this job was paused or cut off: leave at once, without a
        # stop that could still run a batch (the source and sink refuse, but not starting is surer).
        log.error("writer epoch %d was taken over by epoch %d; this job leaves (the launcher starts it again as "
                  "the standby)", lease.epoch, newer)
        logging.shutdown()
        os._exit(writer_lease.FENCED_EXIT)

    lease.keep(_fenced, lease_stop)
    # The Python workers' daemon starts (its imports: pandas, pyarrow, the step) beside the query's
    # start instead of inside the first batch, which waited for it (docs/latency.md, restart).
    warming = threading.Thread(target=_warm_quietly, args=(spark, cfg), name="warm-workers", daemon=True)
    warming.start()
    try:
        query = start_query(spark, cfg,
                            fault=KillAtRandom(cfg.test_kill_probability) if cfg.test_kill_probability else None,
                            start_phases=phases, lease=lease, heap=heap_watch(cfg, heap))
        # The writer's query no longer plans through Spark's data source daemons once it ran a batch.
        threading.Thread(target=planner_daemons.stop_after_first_batch, args=(spark, query, warming, stopping),
                         name="planner-daemons", daemon=True).start()

        def _stop(signum: int, frame: FrameType | None) -> None:
            if not stopping.is_set():
                log.info("signal %d: stopping the query", signum)
                stopping.set()
                stopper.start()

        stopper = threading.Thread(target=query.stop, daemon=True)

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        log.info("streaming job running: Kafka %s topic %s -> %s (trigger %d ms, default broker timeout %d ms; %s)",
                 cfg.bootstrap, cfg.kafka_topic, cfg.warehouse, cfg.trigger_interval_ms, cfg.broker_timeout_ms,
                 "driver JVM started from its class archive" if archive
                 else "no class archive for this Java and these jars: './run.sh setup' makes it")
        query.awaitTermination()
    except state_layout.LayoutError as exc:
        log.error("%s", exc)
        return 2
    except Exception as exc:  # the query died: report it in one line, exit non-zero for the supervisor
        if not stopping.is_set():
            newer = lease.fenced_by()
            if newer is not None:
                log.error("writer epoch %d was taken over by epoch %d; this job leaves", lease.epoch, newer)
                return writer_lease.FENCED_EXIT
            log.error("streaming query failed: %s", str(exc).splitlines()[0] if str(exc) else exc)
            return 1
    finally:
        lease_stop.set()
        if stopping.is_set():  # the query ended by the stop; let that call return before the context goes
            stopper.join(timeout=30)
        spark.stop()
    log.info("streaming job stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
