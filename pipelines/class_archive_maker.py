"""Makes the class archive of Spark's driver (pipelines/class_archive.py) by running the job's own
query over a few events read from files, in a JVM that dumps its classes at exit. Kept apart from
class_archive, which the job imports for the archive's options: this module imports the job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from conf import load_config
from conf.version import argument_parser
from pipelines.class_archive import DIRECTORY, archive_path


def _warm_up(target: Path) -> None:
    """Run the job's query over a few files of events, in a JVM that dumps its classes at exit."""
    from pyspark import SparkContext
    from pyspark.sql.functions import col

    from pipelines.job import build_spark, start_query
    from schemas import events as ev

    with tempfile.TemporaryDirectory(prefix="namesrv-cds-") as scratch:
        data = Path(scratch)
        cfg = load_config({"NAMESRV_DATA_DIR": str(data / "data"), "NAMESRV_KAFKA_SOURCE": "connector"})
        spark = build_spark(cfg, "namesrv-class-archive", driver_java_options=f"-XX:ArchiveClassesAtExit={target}")
        inbox = data / "events"
        inbox.mkdir()
        now = int(time.time() * 1000)
        batches = [[ev.register_broker_event(cluster="WarmUp", broker_name=f"warm-{g}", broker_id=0,
                                             addr=f"127.0.0.1:{30000 + g}",
                                             topics={f"Warm-{g}": ev.topic_config(f"Warm-{g}")}) for g in range(4)],
                   [ev.heartbeat_event(cluster="WarmUp", broker_name=f"warm-{g}", broker_id=0,
                                       addr=f"127.0.0.1:{30000 + g}") for g in range(4)]]
        for i, events in enumerate(batches):
            rows = [{"partition": 0, "offset": i * 10 + n, "timestamp": now, "key": key.decode(),
                     "value": value.decode()} for n, (key, value) in enumerate(map(ev.encode, events))]
            (inbox / f"{i}.json").write_text("\n".join(json.dumps(r) for r in rows))
        events_df = (spark.readStream.schema("partition INT, offset LONG, timestamp LONG, key STRING, value STRING")
                     .option("maxFilesPerTrigger", 1).json(str(inbox))
                     .select("partition", "offset", "timestamp", "key", col("value").cast("binary").alias("value")))
        query = start_query(spark, cfg, query_name="class_archive", events=events_df)
        deadline = time.monotonic() + 300
        while (query.lastProgress or {}).get("batchId", -1) < len(batches) - 1 and time.monotonic() < deadline:
            if query.exception() is not None:
                raise RuntimeError(f"the warm-up query failed: {query.exception()}")
            time.sleep(0.2)
        query.stop()
        spark.read.format("delta").load(str(cfg.warehouse / "topic_queue")).count()  # Delta's reader too
        spark.stop()
        # The archive is written when the JVM exits: it exits when its stdin closes.
        gateway = SparkContext._gateway
        proc = getattr(gateway, "proc", None)
        if proc is None:
            raise RuntimeError("no handle on the driver JVM's process")
        proc.stdin.close()
        proc.wait(timeout=120)


def make(progress: Callable[[str], object] = print) -> Path | None:
    """Make the archive for this Java and these jars unless it exists; None when there can be none."""
    path = archive_path()
    if path is None or path.is_file():
        return path
    DIRECTORY.mkdir(parents=True, exist_ok=True)
    for stale in DIRECTORY.glob("spark-driver-*.jsa"):  # another Java's or jar set's
        stale.unlink()
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    started = time.monotonic()
    progress("jvm: making the class archive of Spark's driver (once; halves a SparkSession's start)")
    done = subprocess.run([sys.executable, "-m", "pipelines.class_archive_maker", "dump", str(tmp)],
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
        tmp.unlink(missing_ok=True)
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"making the class archive failed (exit {done.returncode}):\n{tail}")
    tmp.rename(path)
    progress(f"jvm:   done in {time.monotonic() - started:.0f} s ({path.stat().st_size / 1e6:.0f} MB, {path})")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser("python -m pipelines.class_archive_maker",
                             "Make (once) the class archive that halves the start of Spark's driver JVM.")
    parser.add_argument("action", choices=("make", "dump", "path"))
    parser.add_argument("target", nargs="?", help="dump: the file the JVM writes at exit")
    args = parser.parse_args(argv)
    if args.action == "dump":
        if not args.target:
            parser.error("dump needs the target file")
        _warm_up(Path(args.target))
        return 0
    if args.action == "path":
        print(archive_path() or "")
        return 0
    try:
        made = make()
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"jvm: {exc}", file=sys.stderr)
        return 1
    if made is None:
        print("jvm: no class archive: Java or the Spark jars are missing", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
