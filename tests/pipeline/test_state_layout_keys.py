"""The stateful operator's bucket keys (pipelines/buckets.py `Layout`): named so that Spark's hash
partitioning hands every task of the stateful stage as many, checked against Spark itself."""

from __future__ import annotations

import random
import string
from collections import Counter

import pytest

from pipelines import buckets as bk
from pipelines.state_layout import wanted_layout
from schemas import events as ev


def test_our_murmur3_is_the_partition_spark_hashes_a_string_key_to(spark):
    from pyspark.sql.functions import col, hash, lit, pmod
    rng = random.Random(7)
    alphabet = string.printable + "éü€中😀"
    keys = ["", "b32/0", "b32/31", "broker-a", *(''.join(rng.choice(alphabet) for _ in range(rng.randint(1, 13)))
                                                 for _ in range(200))]
    df = spark.createDataFrame([(k,) for k in keys], "k string")
    for partitions in (1, 2, 3, 7):
        spark_says = {r["k"]: r["p"] for r in df.select("k", pmod(hash(col("k")), lit(partitions)).alias("p")).collect()}
        assert {k: bk.spark_partition(k, partitions) for k in keys} == spark_says


@pytest.mark.parametrize(("buckets", "partitions"), [(32, 2), (32, 3), (8, 4), (1, 2)])
def test_a_balanced_layout_gives_every_task_of_the_stateful_stage_as_many_buckets(spark, buckets, partitions):
    from pyspark.sql.functions import col, spark_partition_id
    layout = bk.Layout(buckets, partitions)
    assert len(set(layout.keys)) == buckets and all(k.startswith(layout.prefix) for k in layout.keys)
    df = (spark.createDataFrame([(k,) for k in layout.keys], "k string").repartition(partitions, col("k"))
          .select(spark_partition_id().alias("task")))
    per_task = Counter(r["task"] for r in df.collect())
    assert max(per_task.values()) - min(per_task.values(), default=0) <= 1
    assert sum(per_task.values()) == buckets and (len(per_task) == min(buckets, partitions))


def test_the_keys_before_balancing_keep_their_names_and_fall_where_their_hash_puts_them():
    old = bk.Layout(32)
    assert old.keys == tuple(f"b32/{n}" for n in range(32)) and old.tag == 32  # as batches planned before recorded it
    assert Counter(bk.spark_partition(k, 2) for k in old.keys) == {1: 19, 0: 13}  # the imbalance balancing removed
    assert not any(k.startswith(bk.Layout(32, 2).prefix) for k in old.keys)
    assert not any(k.startswith(old.prefix) for k in bk.Layout(32, 2).keys)


def test_a_layout_goes_through_its_tag_and_refuses_no_bucket():
    for layout in (bk.Layout(32), bk.Layout(32, 2), bk.Layout(5, 7)):
        assert bk.Layout.of_tag(layout.tag) == layout and bk.Layout.of_tag(str(layout.tag)) == layout
    with pytest.raises(ValueError, match="at least one bucket"):
        bk.Layout(0, 2)
    with pytest.raises(ValueError, match="one partition"):
        bk.Layout(4, 0)


def test_the_layout_a_start_runs():
    assert wanted_layout(None, 32, 2) == bk.Layout(32, 2)  # new, or keyed per group: balanced
    assert wanted_layout(bk.Layout(32), 32, 2) == bk.Layout(32, 2)  # recorded before balancing: moved
    # a checkpoint keeps the partition count of its first start, whatever the variable says now
    assert wanted_layout(bk.Layout(32, 2), 32, 4) == bk.Layout(32, 2)
    assert wanted_layout(bk.Layout(32, 2), 8, 4) == bk.Layout(8, 2)


def test_the_key_column_puts_broker_groups_in_the_layouts_buckets_and_leaves_other_keys_alone(spark):
    from pyspark.sql.functions import col
    layout = bk.Layout(4, 2)
    keys = [f"broker-{i}" for i in range(40)] + [f"{ev.KV_KEY_PREFIX}ns", ev.CONFIG_KEY, None]
    out = {r["k"]: r["b"] for r in spark.createDataFrame([(k,) for k in keys], "k string")
           .select(col("k"), layout.key_column(col("k")).alias("b")).collect()}
    assert {out[k] for k in keys[:40]} == set(layout.keys)
    assert out[f"{ev.KV_KEY_PREFIX}ns"] == f"{ev.KV_KEY_PREFIX}ns" and out[ev.CONFIG_KEY] == ev.CONFIG_KEY
    assert out[None] is None
    # the same brokerName lands in the same bucket number under any layout of this count
    old = {r["k"]: r["b"] for r in spark.createDataFrame([(k,) for k in keys[:40]], "k string")
           .select(col("k"), bk.Layout(4).key_column(col("k")).alias("b")).collect()}
    assert all(layout.keys.index(out[k]) == bk.Layout(4).keys.index(old[k]) for k in keys[:40])
