"""The job sized to its fleet (pipelines/sizing.py): the driver's heap and the task slots from the
newest cut's fleet, the settings that fix them, and the watches that say when the fleet outgrew them.

The model's constants come from real runs (docs/scaling.md, "Sizing the job"); these tests hold
its shape: more fleet never asks for less heap, the clamps, the setting winning, bad values
refused with a message, and the fleet read from a real warehouse written by the sink."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines import sizing
from pipelines.sizing import Fleet, GiB, HeapWatch, MiB, driver_heap, jvm_size, parse_jvm_size
from tests.helpers import reg, topics

HOST = 24 * GiB  # the bench's machine
SLOTS, BUCKETS = 2, 32


def auto(fleet: Fleet | None, host: int = HOST) -> sizing.Heap:
    return driver_heap("auto", fleet, host_memory=host, slots=SLOTS, buckets=BUCKETS)


fleets = st.builds(Fleet, st.integers(0, 2_000_000), st.integers(0, 4_000_000), st.integers(0, 50_000_000))


@given(fleets, st.integers(0, 500_000), st.integers(0, 500_000), st.integers(0, 5_000_000))
def test_a_bigger_fleet_never_gets_a_smaller_heap(fleet, more_groups, more_brokers, more_rows):
    bigger = Fleet(fleet.groups + more_groups, fleet.brokers + more_brokers, fleet.queue_rows + more_rows)
    small, big = auto(fleet), auto(bigger)
    assert small.bytes <= big.bytes
    assert small.needed_bytes <= big.needed_bytes
    assert sizing.FLOOR_BYTES <= big.bytes <= sizing.ceiling(HOST)
    assert parse_jvm_size(big.size) == big.bytes and big.bytes % (256 * MiB) == 0


def test_the_heap_grows_with_the_fleet_past_the_floor():
    sizes = [auto(Fleet(groups, groups, groups * 113)).bytes for groups in (1_000, 10_000, 100_000, 300_000, 1_000_000)]
    assert sizes == sorted(sizes) and sizes[0] == GiB and sizes[-1] > 4 * GiB, sizes


def test_an_empty_warehouse_and_a_small_fleet_get_the_floor():
    for fleet in (None, Fleet(0, 0, 0), Fleet(1_000, 1_000, 23_000)):
        heap = auto(fleet)
        assert (heap.size, heap.clamp, heap.source) == ("1g", "floor", "auto")
    assert "no cut yet" in auto(None).describe() and "the floor" in auto(None).describe()


def test_the_measured_fleets_fit_the_heaps_they_ran_in():
    """100,000 groups × 23 topics ran in 1 GiB (peak live 37 % of it): the state the run measured
    (memoryUsedBytes 92.5 MB) asks for no more than that heap, and the fleet's estimate, an upper
    one, for at most a step more."""
    assert sizing.heap_for_state(92_548_504, slots=SLOTS, buckets=BUCKETS) <= GiB
    assert auto(Fleet(100_000, 100_000, 2_300_000)).bytes <= GiB + 256 * MiB


def test_a_fleet_past_the_host_gets_a_quarter_of_its_memory_and_says_so():
    huge = Fleet(5_000_000, 10_000_000, 500_000_000)
    heap = auto(huge)
    assert (heap.bytes, heap.clamp) == (6 * GiB, "ceiling")
    assert heap.needed_bytes > heap.bytes and "a quarter of the host's memory" in heap.describe()
    # a host too small for a quarter to reach the floor still gets the floor
    assert auto(huge, host=2 * GiB).size == "1g"


def test_an_explicit_size_wins_over_the_fleet():
    huge = Fleet(5_000_000, 10_000_000, 500_000_000)
    for setting, expected in (("3g", 3 * GiB), ("3072m", 3 * GiB), ("1536M", 1536 * MiB), ("2097152k", 2 * GiB),
                              ("1073741824", GiB)):
        heap = driver_heap(setting, huge, host_memory=HOST, slots=SLOTS, buckets=BUCKETS)
        assert (heap.size, heap.bytes, heap.source, heap.clamp) == (setting, expected, "setting", None)
        assert "smaller than the fleet needs" in heap.describe()
    # larger than auto would give, even past the host's quarter: the operator's choice
    heap = driver_heap("16g", Fleet(10, 10, 100), host_memory=HOST, slots=SLOTS, buckets=BUCKETS)
    assert heap.size == "16g" and "auto would size 1g" in heap.describe()


def test_the_collector_follows_the_heap():
    """The serial collector while the heap is the floor (its full collections walk a live set the
    floor bounds), G1 past it, whether auto or the setting chose the size; both shrink a heap a
    collection leaves more than 30 % free."""
    def options(heap: sizing.Heap) -> list[str]:
        return sizing.collector_options(heap).split()
    floor = auto(Fleet(1_000, 1_000, 23_000))
    assert floor.collector == "serial" and "-XX:+UseSerialGC" in options(floor) and "serial collector" in floor.describe()
    past = auto(Fleet(1_000_000, 1_000_000, 113_000_000))
    assert past.bytes > GiB and past.collector == "G1" and "-XX:+UseG1GC" in options(past)
    assert "-XX:+UseSerialGC" not in options(past) and "-XX:+UseG1GC" not in options(floor)
    for setting, collector in (("512m", "serial"), ("1g", "serial"), ("1025m", "G1"), ("3g", "G1")):
        heap = driver_heap(setting, None, host_memory=HOST, slots=SLOTS, buckets=BUCKETS)
        assert heap.collector == collector, setting
        assert "-XX:MaxHeapFreeRatio=30" in options(heap)


def test_the_tests_driver_runs_the_collector_its_heap_was_given(spark):
    """The options reach the JVM pyspark starts: the session the tests share has the floor's heap,
    so its collectors are the serial ones (Copy, MarkSweepCompact), not G1's."""
    beans = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    names = sorted(str(beans.get(i).getName()) for i in range(beans.size()))
    assert names == ["Copy", "MarkSweepCompact"], names


@pytest.mark.parametrize("setting", ["", "0g", "-1g", "1.5g", "abc", "3gb", "g", "256m", "471859199"])
def test_a_size_spark_would_not_take_is_refused_with_a_message(setting):
    with pytest.raises(ValueError, match=r"JVM memory size|512m"):
        driver_heap(setting, None, host_memory=HOST, slots=SLOTS, buckets=BUCKETS)


def test_bad_figures_are_refused():
    with pytest.raises(ValueError, match="negative"):
        Fleet(-1, 0, 0)
    with pytest.raises(ValueError, match="memory must be positive"):
        auto(None, host=0)
    with pytest.raises(ValueError, match="positive"):
        driver_heap("auto", None, host_memory=HOST, slots=0, buckets=BUCKETS)
    with pytest.raises(ValueError, match="positive"):
        jvm_size(0)


def test_jvm_sizes_round_up_to_256_mib():
    assert [jvm_size(n) for n in (1, 256 * MiB, GiB, GiB + 1, 3 * GiB - 1)] == ["256m", "256m", "1g", "1280m", "3g"]


def test_task_slots_come_from_the_local_master():
    assert [sizing.local_slots(m, 8) for m in ("local[2]", "local", "local[*]", "local[4, 3]", "spark://h:7077")] == \
        [2, 1, 8, 4, 1]


def test_fewer_buckets_per_slot_ask_for_more_heap():
    """A task holds its bucket's state twice (in and out): one bucket on many slots is the whole state."""
    one = sizing.heap_for_state(100 * MiB, slots=8, buckets=1)
    many = sizing.heap_for_state(100 * MiB, slots=8, buckets=32)
    assert one > many


def test_the_watch_warns_once_per_crossing_and_names_the_next_size():
    watch = HeapWatch(GiB, slots=SLOTS, buckets=BUCKETS, host_memory=HOST)
    limit = watch.limit
    assert 0 < limit < GiB * sizing.LIVE_SHARE
    seen = [watch.observe(s) for s in (limit // 2, limit - 1, limit + 1, limit * 2, int(limit * 0.95), limit + 2)]
    assert [p.warn for p in seen] == [False, False, True, False, False, False]  # 95 % is not under the re-arm line
    assert seen[2].needed > GiB and seen[0].needed <= GiB
    assert watch.observe(int(limit * 0.5)).warn is False  # back under: re-armed, no warning
    again = watch.observe(limit * 3)
    assert again.warn
    text = watch.message(again)
    assert f"the next start needs at least {jvm_size(again.needed)}" in text and "NAMESRV_SPARK_DRIVER_MEMORY=auto" in text


def test_the_watch_names_the_hosts_ceiling_when_the_state_outgrew_it():
    watch = HeapWatch(GiB, slots=SLOTS, buckets=BUCKETS, host_memory=4 * GiB)
    p = watch.observe(4 * GiB)
    assert p.warn and "the next start needs at least 1g" in watch.message(p) and "more than a quarter" in watch.message(p)


def test_the_state_of_a_progress_sums_its_state_operators():
    assert sizing.state_of_progress(None) is None
    assert sizing.state_of_progress({"stateOperators": []}) is None
    assert sizing.state_of_progress({"stateOperators": [{"memoryUsedBytes": 5}, {"memoryUsedBytes": 7}]}) == 12


def test_a_slow_batch_is_told_with_where_its_time_went():
    from pipelines.job import slow_batch
    progress = {"batchId": 23, "numInputRows": 5000,
                "durationMs": {"triggerExecution": 41_000, "addBatch": 30_000, "latestOffset": 9_000, "walCommit": 0,
                               "queryPlanning": 2_000},
                "stateOperators": [{"numRowsTotal": 32, "numRowsUpdated": 30, "allUpdatesTimeMs": 12_000,
                                    "commitTimeMs": 800}]}
    said = slow_batch(progress)
    assert said == ("batch 23 took 41000 ms (5000 input rows): addBatch 30000, latestOffset 9000, queryPlanning 2000; "
                    "state rows 32, updated 30 in 12000 ms, committed in 800 ms")
    assert slow_batch({**progress, "durationMs": {"triggerExecution": 9_999, "addBatch": 9_000}}) is None
    assert slow_batch({"batchId": 1}) is None


def test_the_fleet_is_read_from_the_newest_cut_of_a_real_warehouse(tmp_path):
    """The sink writes the cut (no Spark); the reader counts its rows from the Delta log alone."""
    from tests.delta_history import SinkDriver
    warehouse = tmp_path / "delta"
    assert sizing.read_fleet(warehouse) is None  # nothing yet
    d = SinkDriver(warehouse)
    t0 = 1_700_000_000_000
    d.run_batch([reg(f"sz-{g}", 0, f"10.9.0.{g}:10911", tps=topics("A", "B", "C")) for g in range(5)]
                + [reg("sz-0", 1, "10.9.1.0:10911", tps=topics("A", "B", "C"))], t0)
    d.run_batch([reg("sz-5", 0, "10.9.0.5:10911", tps=topics("D", "E"))], t0 + 1_000)
    fleet = sizing.read_fleet(warehouse)
    assert fleet is not None
    assert (fleet.groups, fleet.brokers, fleet.queue_rows) == (6, 7, 17)
    assert fleet.snapshot_id == 1
    # a progress record without its cut (a job instance that committed none): the snapshots table's row
    from schemas.progress import read_progress, write_progress
    record = read_progress(warehouse)
    assert record is not None and record.pop("cut")
    write_progress(warehouse, record)
    assert sizing.read_fleet(warehouse) == fleet
    sized = sizing.size_job("auto", "auto", warehouse, buckets=BUCKETS, partitions=1)
    assert sized.heap.fleet == fleet and sized.heap.size == "1g"
    # the master beside it: one slot per task of a one-partition stage
    assert sized.slots.master == "local[1]" and sized.slots.source == "auto"


@pytest.mark.parametrize(("partitions", "cores", "expected"), [
    (1, 1, "local[1]"), (2, 1, "local[1]"), (2, 2, "local[2]"), (2, 16, "local[2]"), (8, 4, "local[4]"),
    (8, 16, "local[8]")])
def test_auto_gives_one_slot_per_task_of_the_stateful_stage_up_to_the_cores(partitions, cores, expected):
    """Never fewer slots than the stage's tasks (they would run in turn: a quarter of a second more
    from publish to served, measured), never more (a slot without a task holds nothing, gives nothing)."""
    slots = sizing.resolve_master("auto", partitions=partitions, cores=cores)
    assert (slots.master, slots.slots, slots.source, slots.auto_master) == (expected, int(expected[6:-1]), "auto",
                                                                             expected)


def test_auto_is_case_blind_and_says_why():
    slots = sizing.resolve_master(" AUTO ", partitions=2, cores=2)
    assert slots.master == "local[2]"
    assert slots.describe() == ("Spark local[2]: 2 task slots, one per task of the stateful stage "
                                "(NAMESRV_SPARK_MASTER=auto; NAMESRV_SHUFFLE_PARTITIONS=2, 2 cores)")
    with pytest.raises(ValueError, match="positive stage and host"):
        sizing.auto_slots(0, 2)


@pytest.mark.parametrize(("master", "slots"), [
    ("local[2]", 2), ("local[*]", 16), ("local", 1), ("local[4, 3]", 4), ("spark://h:7077", 1)])
def test_an_explicit_master_passes_through(master, slots):
    resolved = sizing.resolve_master(master, partitions=8, cores=16)
    assert (resolved.master, resolved.slots, resolved.source) == (master, slots, "setting")
    assert resolved.auto_master == "local[8]"
    text = resolved.describe()
    assert text.startswith(f"Spark {master} (NAMESRV_SPARK_MASTER)")
    assert ("auto would give local[8]" in text) == master.startswith("local")


def test_the_heap_counts_the_slots_auto_chose():
    """The heap model's per-slot term takes the resolved N: more slots, more heap for one state."""
    big = Fleet(2_000_000, 2_000_000, 26_000_000, snapshot_id=1)
    one = driver_heap("auto", big, host_memory=HOST, slots=sizing.resolve_master("auto", partitions=1, cores=16).slots,
                      buckets=BUCKETS)
    many = driver_heap("auto", big, host_memory=HOST,
                       slots=sizing.resolve_master("auto", partitions=16, cores=16).slots, buckets=BUCKETS)
    assert many.needed_bytes > one.needed_bytes
