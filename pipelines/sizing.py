"""The job sized to its fleet (issue 35, item 6): the driver JVM's heap, decided before the session starts.

Spark runs in local mode inside the job's process: the driver's JVM also runs the tasks and holds
the HDFS-backed state store, and pyspark starts that JVM when the SparkSession is built, so its
heap (`spark.driver.memory`, `-Xmx`) is fixed for the life of the process. A fixed 1 GiB was too
small for some fleets and a waste for others; `NAMESRV_SPARK_DRIVER_MEMORY=auto` (the default)
sizes it at every start to the fleet the warehouse's newest cut holds, and a JVM size such as
`3g` fixes it.

The model (docs/scaling.md, "Sizing the job", has the runs it was calibrated on):

* The route state `S`, in bytes: what the stateful operator keeps per broker group (its core
  line, its live entries, its compressed topic table; `pipelines/buckets.py`), estimated from the
  cut's row counts as `240·groups + 240·live brokers + 24·queue rows`. Encoded by the real bucket
  code, a group of one broker is 479 bytes of core plus 367 of topic table for a default broker's
  13 system topics, each further broker 242 bytes, each further topic 4 (the bench's names) to
  25 bytes (random 24-character names); Spark's `memoryUsedBytes` measured 925 bytes a group for
  1,000 to 100,000 groups of 23 topics. The estimate takes the upper end of the topic cost: names
  of real fleets compress worse than the bench's.
* The heap's live peak: `64 MiB + 3.4·S + 2·slots·S/buckets`. The base is Spark, Delta and the
  query at rest (56-68 MiB after a full collection); 3.4·S covers the store's committed map and
  the version a batch writes (2·S) and the snapshot the store writes every tenth version (about
  one S more: the peaks of a 100,000-group wave); each running task holds its bucket's state row
  as it goes to Python and the one that comes back (2·S/buckets per slot).
* The heap: that peak at 40 % of it (the collector keeps working well below it; a wave of 100,000 groups
  × 23 topics peaked at 37 % of a 1 GiB heap and ran), rounded up to 256 MiB, and clamped to
  [1 GiB, a quarter of the host's memory]: below 1 GiB the sort pages and the JVM's own use
  leave too little, above a quarter the host's other processes (Kafka, the serving processes,
  the Python workers, which decode the same state) are starved.
* The collector follows the heap (`collector_options`): serial at the floor, G1 past it.

The task slots (`NAMESRV_SPARK_MASTER=auto`, the default): the driver's JVM runs `local[N]`, and
each slot that gets a task keeps a Python worker (about 90 MiB) alive. N is one slot per task the
stateful stage runs at once (`NAMESRV_SHUFFLE_PARTITIONS`, fixed by the checkpoint), at most the
host's cores, and not the fleet's: a slot beyond the stage's tasks never gets one (Spark forks a
worker only for a task), and a slot fewer makes the stage's tasks run in turn, which cost a
quarter of a second from publish to served at every fleet size measured (docs/scaling.md, "The
task slots"). An explicit master (`local[2]`, `local[*]`, `spark://…`) is taken as it is.

Everything here is pure but `read_fleet`, `host_memory_bytes` and `host_cores`, the reads at the edge.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from conf.store import StorePath, store_path

log = logging.getLogger(__name__)

MiB = 1 << 20
GiB = 1 << 30
AUTO = "auto"

# The state estimate, bytes per unit of the cut (the module's docstring says where they come from).
GROUP_BYTES = 240
BROKER_BYTES = 240
QUEUE_ROW_BYTES = 24
# The heap's live peak: base + STATE_FACTOR·S + TASK_COPIES·slots·S/buckets.
BASE_BYTES = 64 * MiB
STATE_FACTOR = 3.4
TASK_COPIES = 2
# The share of the heap that live peak may take.
LIVE_SHARE = 0.4
FLOOR_BYTES = GiB
HOST_SHARE = 0.25
STEP_BYTES = 256 * MiB
# Spark refuses a driver whose JVM has less than 1.5 × its 300 MiB reserve (INVALID_DRIVER_MEMORY).
SPARK_MINIMUM_BYTES = 512 * MiB
# The driver's garbage collector (`collector_options`): the serial one up to this heap, G1 above.
SERIAL_MAX_BYTES = FLOOR_BYTES
# Where the serial collector's heap starts (Java's default: 1/64 of the host's memory, 384 MiB
# here). It grows to what the batches need, each step after a full collection: from 32 MiB the
# driver's start took eight of them (0.67 s of pauses, by hand); from 128 MiB, under the 139-144
# MiB a 1,000-broker fleet's batches hold, none but the one the metaspace asks for. The
# metaspace's first collection threshold (Java's default about 21 MiB) sits above what the
# session loads besides the class archive, so that one is not asked for either.
SERIAL_INITIAL = "128m"
SERIAL_METASPACE = "64m"
# A warned state must fall this far under the line before a new crossing warns again.
REARM_SHARE = 0.9

_SIZE = re.compile(r"([1-9][0-9]*)([kmgt]?)", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": MiB, "g": GiB, "t": 1 << 40}


@dataclass(frozen=True)
class Fleet:
    """What the newest cut holds, as far as the heap is concerned: broker groups (cluster_addr's
    rows), live brokers (broker_live's) and queue rows (topic_queue's: one per topic and group)."""

    groups: int
    brokers: int
    queue_rows: int
    snapshot_id: int | None = None

    def __post_init__(self) -> None:
        for name in ("groups", "brokers", "queue_rows"):
            if getattr(self, name) < 0:
                raise ValueError(f"a fleet's {name} cannot be negative: {getattr(self, name)}")

    def describe(self) -> str:
        cut = "no cut yet" if self.snapshot_id is None else f"cut {self.snapshot_id}"
        return f"{self.groups:,} broker groups, {self.brokers:,} live brokers, {self.queue_rows:,} queue rows ({cut})"


EMPTY = Fleet(0, 0, 0)


@dataclass(frozen=True)
class Heap:
    """The driver's heap and why: `size` goes to `spark.driver.memory` as it is."""

    size: str
    bytes: int
    source: Literal["auto", "setting"]
    fleet: Fleet
    state_bytes: int  # the fleet's estimated route state
    needed_bytes: int  # the heap the model asks for that state, before rounding and clamps
    auto_size: str  # what `auto` gives (this size, unless the setting fixed another)
    clamp: Literal["floor", "ceiling"] | None = None

    def describe(self) -> str:
        """The start's log line: the heap, where it came from, and the fleet it was sized for."""
        needed = jvm_size(self.needed_bytes)
        if self.source == "setting":
            text = (f"driver heap {self.size} (NAMESRV_SPARK_DRIVER_MEMORY); auto would size {self.auto_size} for "
                    f"{self.fleet.describe()}")
            return text + ("" if self.bytes >= self.needed_bytes else "; this heap is smaller than the fleet needs")
        why = {None: "", "floor": f" (the floor; the fleet needs {needed})",
               "ceiling": f" (a quarter of the host's memory; the fleet needs {needed}: a bigger host or a Spark cluster)"}
        return (f"driver heap {self.size}{why[self.clamp]}, sized for {self.fleet.describe()}: "
                f"route state about {self.state_bytes / MiB:,.1f} MiB; {self.collector} collector")

    @property
    def collector(self) -> Literal["serial", "G1"]:
        """The collector this heap's JVM runs (`collector_options` says why)."""
        return "serial" if self.bytes <= SERIAL_MAX_BYTES else "G1"


def collector_options(heap: Heap) -> str:
    """The driver JVM's collector options for `heap`. Both give back what a registration wave
    grew the heap to: a collection that leaves more than 30 % of the heap free shrinks it.

    The serial collector for a heap at the floor, which the model gives a fleet whose live peak is
    under 40 % of 1 GiB. G1 (the JVM's own choice on this host) regrew its young generation to
    100-300 MiB after a collection over some 80 MiB alive, and its periodic cycle never ran
    while young collections came every few seconds, so the JVM's memory at 10,000 × 100
    re-registering spread over 546-991 MiB between runs (`jcmd VM.native_memory`: heap committed
    629 MiB, 441-527 of it in use, G1's own structures 63); the serial collector's heap stayed at
    the batches' need, 223-244 MiB committed, the JVM at 557-615 MiB, with the wave served as
    fast (by hand, 2026-11-29, docs/scaling.md decision 30). Its pauses are those of one thread
    over the live set, which the floor bounds (the longest at 10,000 × 100: see that record).
    Past the floor the fleet's state is larger and a full collection on one thread would stop
    batches for seconds, so G1, with a concurrent cycle at least every 30 s that uncommits (when
    G1 alone kept the heap a wave grew to, that cycle took the JVM at 10,000 × 100 heartbeating
    from 1,313 to 813 MiB, registration 53 s either way)."""
    free = "-XX:MaxHeapFreeRatio=30 -XX:MinHeapFreeRatio=10"
    if heap.collector == "serial":
        return f"-XX:+UseSerialGC -Xms{SERIAL_INITIAL} -XX:MetaspaceSize={SERIAL_METASPACE} {free}"
    return f"-XX:+UseG1GC -XX:G1PeriodicGCInterval=30000 {free}"


def parse_jvm_size(text: str) -> int:
    """Bytes of a JVM memory size as `-Xmx` takes it (`1g`, `3072m`, `1048576k`, plain bytes)."""
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"not a JVM memory size: {text!r} (a whole number with an optional k, m, g or t, such as 3g)")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def jvm_size(n_bytes: int) -> str:
    """`n_bytes` rounded up to 256 MiB, as a JVM size: whole GiB as `Ng`, the rest as `Nm`."""
    if n_bytes <= 0:
        raise ValueError(f"a heap must be positive: {n_bytes}")
    rounded = -(-n_bytes // STEP_BYTES) * STEP_BYTES
    return f"{rounded // GiB}g" if rounded % GiB == 0 else f"{rounded // MiB}m"


def state_bytes(fleet: Fleet) -> int:
    """The route state the stateful operator holds for `fleet` (bytes; an upper estimate)."""
    return GROUP_BYTES * fleet.groups + BROKER_BYTES * fleet.brokers + QUEUE_ROW_BYTES * fleet.queue_rows


def _slot_share(slots: int, buckets: int) -> float:
    if slots < 1 or buckets < 1:
        raise ValueError(f"task slots and state buckets must be positive: {slots}, {buckets}")
    return TASK_COPIES * min(slots, buckets) / buckets


def heap_for_state(state: int, *, slots: int, buckets: int) -> int:
    """The heap (bytes, unrounded, unclamped) whose LIVE_SHARE holds the live peak of `state`."""
    if state < 0:
        raise ValueError(f"a state cannot be negative: {state}")
    peak = BASE_BYTES + (STATE_FACTOR + _slot_share(slots, buckets)) * state
    return int(peak / LIVE_SHARE)


def state_limit(heap: int, *, slots: int, buckets: int) -> int:
    """The largest state `heap` is sized for: past it, `heap_for_state` asks for more."""
    return max(0, int((heap * LIVE_SHARE - BASE_BYTES) / (STATE_FACTOR + _slot_share(slots, buckets))))


def ceiling(host_memory: int) -> int:
    """The largest heap auto gives on a host of `host_memory` bytes (never under the floor)."""
    if host_memory <= 0:
        raise ValueError(f"a host's memory must be positive: {host_memory}")
    return max(FLOOR_BYTES, int(host_memory * HOST_SHARE) // STEP_BYTES * STEP_BYTES)


def driver_heap(setting: str, fleet: Fleet | None, *, host_memory: int, slots: int, buckets: int) -> Heap:
    """The driver's heap for NAMESRV_SPARK_DRIVER_MEMORY `setting`: a JVM size is taken as it is
    (when Spark accepts it), `auto` sizes it to `fleet` (None: no cut yet, an empty fleet)."""
    fleet = EMPTY if fleet is None else fleet
    state = state_bytes(fleet)
    needed = heap_for_state(state, slots=slots, buckets=buckets)
    top = ceiling(host_memory)
    rounded = parse_jvm_size(jvm_size(needed))
    clamp: Literal["floor", "ceiling"] | None = None
    if rounded < FLOOR_BYTES:
        chosen, clamp = FLOOR_BYTES, "floor"
    elif rounded > top:
        chosen, clamp = top, "ceiling"
    else:
        chosen = rounded
    if not is_auto(setting):
        explicit = parse_jvm_size(setting)
        if explicit < SPARK_MINIMUM_BYTES:
            raise ValueError(f"NAMESRV_SPARK_DRIVER_MEMORY={setting} is below the 512m Spark's driver needs "
                             "(it refuses less than 450 MiB of system memory)")
        return Heap(setting.strip(), explicit, "setting", fleet, state, needed, jvm_size(chosen))
    return Heap(jvm_size(chosen), chosen, "auto", fleet, state, needed, jvm_size(chosen), clamp)


def local_slots(master: str, cpu_count: int) -> int:
    """How many tasks run at once in the driver's JVM: N of `local[N]`, the host's cores for
    `local[*]`, 1 for `local`; a cluster's executors are not the driver's (1: only the per-slot
    term of the model needs it, and the driver then holds no state)."""
    m = re.fullmatch(r"local(?:\[(\*|[0-9]+)(?:,\s*[0-9]+)?\])?", master.strip())
    if m is None:
        return 1
    if m.group(1) is None:
        return 1
    return max(1, cpu_count) if m.group(1) == "*" else max(1, int(m.group(1)))


def is_auto(setting: str) -> bool:
    """Whether a sizing setting (NAMESRV_SPARK_MASTER, NAMESRV_SPARK_DRIVER_MEMORY) asks for `auto`."""
    return setting.strip().lower() == AUTO


def auto_slots(partitions: int, cores: int) -> int:
    """The task slots `auto` gives a stage of `partitions` tasks on `cores` cores: one per task,
    at least one, at most the cores. Measured on 2 cores (2026-11-27, docs/scaling.md): one slot
    for the stage's two tasks saved a worker's 76-95 MiB and cost publish-to-served 0.99 s
    against 0.76 s (median; our Kafka source), at a fleet of any size, since every batch runs
    every task; a slot past the stage's tasks is never given one."""
    if partitions < 1 or cores < 1:
        raise ValueError(f"task slots need a positive stage and host: {partitions} partitions, {cores} cores")
    return min(cores, partitions)


@dataclass(frozen=True)
class Slots:
    """The master the session starts with and why: `master` is a concrete Spark master (never
    `auto`), `slots` the tasks the driver's JVM runs at once (1 for a cluster's master: its
    executors run the tasks, and the heap model's per-slot term then holds no state)."""

    master: str
    slots: int
    source: Literal["auto", "setting"]
    partitions: int
    cores: int
    auto_master: str  # what `auto` gives (this master, unless the setting named another)

    def describe(self) -> str:
        """The start's log line: the master, its slots, and why."""
        if self.source == "setting":
            if not self.master.startswith("local"):
                return f"Spark {self.master} (NAMESRV_SPARK_MASTER): the cluster's executors run the tasks"
            return (f"Spark {self.master} (NAMESRV_SPARK_MASTER): {_slots_text(self.slots)}; auto would give "
                    f"{self.auto_master}")
        return (f"Spark {self.master}: {_slots_text(self.slots)}, one per task of the stateful stage "
                f"(NAMESRV_SPARK_MASTER=auto; NAMESRV_SHUFFLE_PARTITIONS={self.partitions}, "
                f"{self.cores} core{'' if self.cores == 1 else 's'})")


def _slots_text(n: int) -> str:
    return f"{n} task slot{'' if n == 1 else 's'}"


def resolve_master(setting: str, *, partitions: int, cores: int) -> Slots:
    """NAMESRV_SPARK_MASTER `setting` for this start: `auto` becomes `local[N]` (`auto_slots`);
    any other master is taken as it is (Spark checks it)."""
    cores = max(1, cores)
    n = auto_slots(partitions, cores)
    auto_master = f"local[{n}]"
    if is_auto(setting):
        return Slots(auto_master, n, "auto", partitions, cores, auto_master)
    master = setting.strip()
    return Slots(master, local_slots(master, cores), "setting", partitions, cores, auto_master)


@dataclass(frozen=True)
class Pressure:
    """A watch's verdict on one batch: the state, the heap the model asks for it, and whether this
    batch crossed the line (`warn`: the first batch past it since the state was last under it)."""

    state: int
    needed: int
    warn: bool


class HeapWatch:
    """Compares the running query's state (`memoryUsedBytes` of its state operators) with the heap
    the job started with, once per batch; warns once per crossing of the largest state that heap
    was sized for, and again only after the state fell back under REARM_SHARE of it."""

    def __init__(self, heap: int, *, slots: int, buckets: int, host_memory: int) -> None:
        self.heap = heap
        self.slots, self.buckets = slots, buckets
        self.limit = state_limit(heap, slots=slots, buckets=buckets)
        self.top = ceiling(host_memory)
        self._over = False

    def observe(self, state: int) -> Pressure:
        needed = heap_for_state(state, slots=self.slots, buckets=self.buckets)
        if state > self.limit:
            warn, self._over = not self._over, True
        else:
            warn = False
            if state < self.limit * REARM_SHARE:
                self._over = False
        return Pressure(state, needed, warn)

    def message(self, p: Pressure) -> str:
        """The warning: what the state reached, its share of the heap, and the next start's size."""
        nxt = min(parse_jvm_size(jvm_size(p.needed)), self.top)
        text = (f"the route state reached {p.state / MiB:,.1f} MiB, {100 * p.state / self.heap:.0f} % of the driver's "
                f"{jvm_size(self.heap)} heap, past the {self.limit / MiB:,.1f} MiB it was sized for (its live peak "
                f"would pass {100 * LIVE_SHARE:.0f} % of the heap); the next start needs at least {jvm_size(nxt)}: restart "
                "the job with NAMESRV_SPARK_DRIVER_MEMORY=auto (it sizes the heap to the fleet) or that size")
        if parse_jvm_size(jvm_size(p.needed)) > self.top:
            text += f" (the fleet needs {jvm_size(p.needed)}, more than a quarter of this host's memory)"
        return text


def state_of_progress(progress: dict[str, Any] | None) -> int | None:
    """The state operators' `memoryUsedBytes` of a query progress (None: the batch reported none)."""
    ops = (progress or {}).get("stateOperators") or []
    used = [int(op.get("memoryUsedBytes") or 0) for op in ops]
    return sum(used) if used else None


# -- the edge: two reads -------------------------------------------------------------------------

def _row_count(path: str, version: int) -> int:
    """Rows of a Delta table at `version`, from its log's per-file statistics (no data file read);
    a file written without them is counted from its Parquet footer."""
    from deltalake import DeltaTable
    dt = DeltaTable(path, version=version)
    counts = dt.get_add_actions(flatten=True).column("num_records").to_pylist()
    if all(c is not None for c in counts):
        return int(sum(counts))
    return int(dt.to_pyarrow_dataset().count_rows())


def read_fleet(warehouse: StorePath) -> Fleet | None:
    """The fleet of the warehouse's newest cut (None: no cut yet). The progress record names the
    cut and its table versions (`schemas/progress.py`); a record without it (a job instance that
    committed no cut) is looked up in the `snapshots` table. Each count is a Delta log replay and
    a sum over its files' statistics: about 10-30 ms a table."""
    from schemas import tables as t
    from schemas.progress import read_progress
    wh = store_path(warehouse)
    progress = read_progress(wh) or {}
    cut = progress.get("cut")
    if cut is None and progress.get("snapshotId") is not None:
        from snapshots.reader import SnapshotReader
        cut = SnapshotReader(wh).row_at(snapshot_id=int(progress["snapshotId"]))
    if cut is None:
        return None
    count = {table.name: _row_count(str(wh / table.name), int(cut[t.version_column(table)]))
             for table in (t.CLUSTER_ADDR, t.BROKER_LIVE, t.TOPIC_QUEUE)}
    return Fleet(count[t.CLUSTER_ADDR.name], count[t.BROKER_LIVE.name], count[t.TOPIC_QUEUE.name],
                 int(cut["snapshotId"]))


def host_memory_bytes() -> int:
    """The memory this process may use: the host's physical memory, or its cgroup's limit when lower
    (a container's)."""
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for limit_file in (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes")):
        try:
            text = limit_file.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < physical:
            return int(text)
    return int(physical)


def host_cores() -> int:
    """The cores this process may run on (its CPU affinity, as `local[*]`'s JVM sees them)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class JobSize:
    """What a start decides before its session: the master (and its slots) and the driver's heap,
    both from one read of the newest cut's fleet."""

    slots: Slots
    heap: Heap


def size_job(master: str, memory: str, warehouse: StorePath, *, buckets: int, partitions: int,
             announce: bool = True) -> JobSize:
    """The master and the heap for this start: the fleet read once, the host's cores and memory,
    the models; each logged in a line (`announce`: False for a look that starts nothing, such as
    a standby's at its takeover, whose session runs what its start chose). A warehouse that cannot
    be read sizes for an empty fleet, and says so: a start is not refused for the sizing's sake.
    Raises ValueError for a heap Spark would refuse."""
    started = time.monotonic()
    try:
        fleet = read_fleet(warehouse)
    except Exception as exc:  # a damaged or unreachable warehouse is the job's to report, not the sizing's
        log.warning("job sizing: the newest cut's fleet could not be read (%s); sized for none",
                    str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        fleet = None
    read_ms = 1000 * (time.monotonic() - started)
    slots = resolve_master(master, partitions=partitions, cores=host_cores())
    heap = driver_heap(memory, fleet, host_memory=host_memory_bytes(), slots=slots.slots, buckets=buckets)
    if announce:
        log.info("%s", slots.describe())
        log.info("%s (read in %.0f ms)", heap.describe(), read_ms)
    return JobSize(slots, heap)
