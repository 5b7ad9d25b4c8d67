"""The streaming job: wiring only (readStream → applyInPandasWithState → foreachBatch).

Run with `python -m pipelines.job`; configuration comes from conf.load_config() here and is
passed down. SIGTERM/SIGINT stop the query between batches and exit quietly.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path

from conf import STATE_STORES, Config, load_config
from conf.logs import setup_logging
from conf.version import argument_parser
from eventlog.topics import ensure_topic
from pipelines import kafka_source
from pipelines.faults import KillAtRandom
from pipelines.sink import DeltaSink
from pipelines.step import STATE_SCHEMA, StepConfig, make_step
from pipelines.step_rows import OUTPUT_SCHEMA

log = logging.getLogger("namesrv.job")
QUERY_NAME = "namesrv-routes"
# What the step and the source import on an executor (pickled by reference, so shipped as code).
EXECUTOR_PACKAGES = ("conf", "schemas", "routeinfo", "eventlog", "pipelines")


def build_spark(cfg: Config, app_name: str = "namesrv"):
    """A SparkSession for the job. Python workers must run this interpreter: a worker started
    with another Python (the system one) lacks the pinned packages and fails at import."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only, and no hostname warning
    # pyspark's own pandas concat warns on every batch in the workers; it is not ours to fix.
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    # Fewer glibc malloc arenas in the JVM and the Python workers it forks: with one per thread,
    # freed memory stays scattered across arenas and RSS never comes down after a big batch.
    os.environ.setdefault("MALLOC_ARENA_MAX", "2")
    from pyspark.sql import SparkSession
    log4j = Path(__file__).resolve().parent.parent / "conf" / "log4j2.properties"
    # -Xss: on stop, Spark matches a regex over the interrupted Python source's traceback, which
    # overflows the default 1 MiB thread stack and prints a thousand-line StackOverflowError.
    java_opts = f"-Dlog4j2.configurationFile={log4j.as_uri()} -Xss32m"
    spark = (SparkSession.builder.master(cfg.spark_master).appName(app_name)
             .config("spark.sql.shuffle.partitions", str(cfg.shuffle_partitions))
             .config("spark.sql.execution.arrow.pyspark.enabled", "true")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.extraJavaOptions", java_opts)
             .config("spark.executor.extraJavaOptions", java_opts)
             .config("spark.sql.streaming.stateStore.providerClass", STATE_STORES[cfg.state_store])
             .config("spark.python.worker.reuse", "true")
             # Batches run when the source admits one (new records, a due timeout, a tick); see
             # pipelines/admission.py. Spark's own no-data batches would run
             # every trigger, because ProcessingTimeTimeout always asks for another batch.
             .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    if not cfg.spark_master.startswith("local"):
        # Executors elsewhere need our modules (the step and the source are pickled by reference).
        spark.sparkContext.addPyFile(str(code_archive(cfg.data_dir)))
    _quiet_accumulator_server()
    spark.dataSource.register(kafka_source.KafkaEventSource)
    return spark


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

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], EOFError):
            return
        original(self, request, client_address)

    handle_error._namesrv_quiet = True  # type: ignore[attr-defined]
    acc.AccumulatorTCPServer.handle_error = handle_error  # type: ignore[method-assign]


def start_query(spark, cfg: Config, *, query_name: str = QUERY_NAME, fault=None):
    """Start the route query on `spark`; tables are created first so readers always find them."""
    from pyspark.sql.functions import col
    from pyspark.sql.streaming.state import GroupStateTimeout

    sink = DeltaSink(cfg.warehouse, cfg.checkpoint_dir, retention_ms=cfg.history_retention_ms,
                     maintenance_interval_ms=cfg.maintenance_interval_ms, **({"fault": fault} if fault else {}))
    sink.ensure_tables()
    sink.announce_start()
    step = make_step(StepConfig.from_config(cfg))
    raw = (spark.readStream.format(kafka_source.SOURCE_NAME)
           .option("bootstrap", cfg.bootstrap).option("topic", cfg.kafka_topic)
           .option("partitions", str(cfg.kafka_partitions))
           .option("maxRecordsPerBatch", str(cfg.max_records_per_batch))
           .option("heartbeatDeferMs", str(cfg.heartbeat_defer_ms))
           .option("progressDir", str(cfg.warehouse)).load())
    out = (raw.groupBy(col("key"))
           .applyInPandasWithState(step, OUTPUT_SCHEMA, STATE_SCHEMA, "append",
                                   GroupStateTimeout.ProcessingTimeTimeout))
    return (out.writeStream.queryName(query_name)
            .option("checkpointLocation", str(cfg.checkpoint_dir))
            .trigger(processingTime=f"{cfg.trigger_interval_ms} milliseconds")
            .foreachBatch(sink)
            .start())


def main(argv: list[str] | None = None) -> int:
    argument_parser("namesrv-job", "The streaming job: Kafka events -> RocketMQ's route rules -> Delta tables."
                    ).parse_args(argv)
    cfg = load_config()
    setup_logging()
    ensure_topic(cfg.bootstrap, cfg.kafka_topic, cfg.kafka_partitions)
    spark = build_spark(cfg)
    query = start_query(spark, cfg, fault=KillAtRandom(cfg.test_kill_probability) if cfg.test_kill_probability else None)
    stopping = threading.Event()

    def _stop(signum, frame):
        if not stopping.is_set():
            log.info("signal %d: stopping the query", signum)
            stopping.set()
            threading.Thread(target=query.stop, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    log.info("streaming job running: Kafka %s topic %s -> %s (trigger %d ms, default broker timeout %d ms)",
             cfg.bootstrap, cfg.kafka_topic, cfg.warehouse, cfg.trigger_interval_ms, cfg.broker_timeout_ms)
    try:
        query.awaitTermination()
    except Exception as exc:  # the query died: report it in one line, exit non-zero for the supervisor
        if not stopping.is_set():
            log.error("streaming query failed: %s", str(exc).splitlines()[0] if str(exc) else exc)
            return 1
    finally:
        spark.stop()
    log.info("streaming job stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
