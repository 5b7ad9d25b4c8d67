"""Spark reads the tables delta-rs writes: every recorded cut, identically, across maintenance.

A history is written by the real sink (delta-rs), compacted, checkpointed, cleaned up and
vacuumed, written to again; then, for every `snapshots` row and every table of the cut, Spark's
`format("delta")` at that version (and `TIMESTAMP AS OF` the version's commit time) returns the
same rows as delta-rs. `DESCRIBE HISTORY` lists the versions delta-rs lists.
"""

from __future__ import annotations

import time

import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable
from pyspark.sql.functions import lit

from schemas import events as ev
from schemas import tables as t
from tests.delta_history import SinkDriver
from tests.helpers import reg, topics, unreg

pytestmark = pytest.mark.integration


def write_history(d: SinkDriver, t0: int) -> None:
    """Registrations, re-registrations with new queue counts, KV writes, an unregister and an
    expiry: every cut table changes at least twice."""
    n = 0

    def batch(events: list) -> None:
        nonlocal n
        d.run_batch(events, t0 + n * 1000)
        n += 1

    batch([reg(f"ds-{g}", bid, f"127.0.0.1:{30000 + 1000 * bid + g}", tps=topics("DsA", f"Ds{g}"), counter=1)
           for g in range(4) for bid in (0, 1)])
    batch([reg("ds-0", 0, "127.0.0.1:30000", tps=topics("DsA", "Ds0", "DsNew", read=4), counter=2)])
    batch([ev.put_kv_event("ns", "k", "v1"), ev.put_kv_event("ns", "k2", "v2")])
    batch([unreg("ds-1", 1, "127.0.0.1:31001"), ev.update_config_event("enableTopicList", "false")])
    batch([ev.delete_kv_event("ns", "k")])


def test_spark_reads_every_cut_as_delta_rs_does_across_maintenance(spark, tmp_path, figures):
    warehouse = tmp_path / "delta"
    d = SinkDriver(warehouse)
    t0 = int(time.time() * 1000) - 60_000
    write_history(d, t0)
    d.sink.maintain()  # compaction, checkpoint, expired-log cleanup, vacuum
    d.run_batch([reg("ds-9", 0, "127.0.0.1:30009", tps=topics("DsA", "Ds9"))], t0 + 30_000)
    d.sink.maintain()
    d.run_batch([unreg("ds-9", 0, "127.0.0.1:30009")], t0 + 31_000)

    cuts = DeltaTable(str(warehouse / t.SNAPSHOTS.name)).to_pyarrow_table().to_pylist()
    assert len(cuts) >= 6
    compared = 0
    for table in t.CUT_TABLES:
        # Every version a cut names, read by each library; Spark's reads in one union (one job).
        path = str(warehouse / table.name)
        versions = sorted({cut[t.version_column(table)] for cut in cuts})
        theirs = None
        expected_rows: list[dict] = []
        for version in versions:
            read = spark.read.format("delta").option("versionAsOf", version).load(path).withColumn("_v", lit(version))
            theirs = read if theirs is None else theirs.unionByName(read)
            expected_rows += [{**row, "_v": version} for row in DeltaTable(path, version=version).to_pyarrow_table().to_pylist()]
        assert theirs is not None
        expected = spark.createDataFrame(expected_rows, schema=theirs.schema) if expected_rows \
            else spark.createDataFrame([], theirs.schema)
        assert_df_equality(theirs, expected, ignore_row_order=True, ignore_nullable=True)
        compared += len(versions)
    figures(f"delta-spark vs delta-rs: {len(cuts)} cuts, {compared} table versions read identically "
            "after two maintenance runs")


def test_time_travel_by_timestamp_and_history_match_delta_rs(spark, tmp_path):
    warehouse = tmp_path / "delta"
    d = SinkDriver(warehouse)
    write_history(d, int(time.time() * 1000) - 60_000)
    d.sink.maintain()
    path = str(warehouse / t.TOPIC_QUEUE.name)
    history = DeltaTable(path).history()
    versions_rs = sorted(h["version"] for h in history)
    described = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").select("version", "timestamp").collect()
    assert sorted(r["version"] for r in described) == versions_rs
    by_version = {r["version"]: r["timestamp"] for r in described}
    for version in versions_rs:
        # DESCRIBE HISTORY's timestamps are in the session's time zone, as TIMESTAMP AS OF reads them
        stamp = by_version[version].strftime("%Y-%m-%d %H:%M:%S.%f")
        theirs = spark.sql(f"SELECT * FROM delta.`{path}` TIMESTAMP AS OF '{stamp}'")
        ours = spark.read.format("delta").option("versionAsOf", version).load(path)
        # Commits less than a millisecond apart share a timestamp: the newest of them is served.
        newest_same_instant = max(v for v, ts in by_version.items() if ts == by_version[version])
        if newest_same_instant == version:
            assert_df_equality(theirs, ours, ignore_row_order=True)
