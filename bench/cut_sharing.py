"""One copy of the cut per host (issue 36, item 2): what each design costs, measured.

`python -m bench.cut_sharing` writes a warehouse of groups × topics queue rows with the real sink
(`bench.pure.write_warehouse`, 10,000 × 100 = 1,000,000 rows by default), then measures, each
process started fresh:

* **today**: N = 1 and 2 processes each loading the cut as a serving process does
  (`SnapshotReader.load`, then `release_memory` as `SnapshotStore` does after a large reload) and
  answering route bodies through `route_reads.route_body`, as both fronts do: PSS/USS after
  the imports, after the load, after 100,000 random lookups (each a topic's first lookup in the
  cut, then the same again, served from the cut's body cache), and for N = 1 after every topic was
  asked once (the cache full, as a long-lived cut under a whole fleet's clients ends up);
* **shared file**: one builder process writes the cut's encoded answers once (every topic's route
  body, deduplicated by content, the cluster info body, and a topic index) to one file; N = 1, 2
  and 4 readers map it (`mmap`), each also holding the rest of the cut as Python rows (brokers,
  live table, KV: what the writes and the other reads need), and answer a route lookup by an
  index probe and a memoryview slice. Per reader: PSS/USS, the map time, and the CPU per lookup
  for three index probes (open addressing in the file, binary search over the file's sorted
  hashes, a Python dict built from the file), and the dict's own memory. Then one reader that
  reads the rest of the cut from Delta instead, and N = 2 and 4 readers forked from one after it
  mapped the file and built the rest (a pre-forking supervisor's fronts).

The file is a plain binary layout, not Arrow IPC: a lookup reads a handful of fixed-width
integers, and `memoryview.cast` indexes them at about 0.1 µs each where a scalar read out of an
Arrow array costs about 0.8 µs (both measured here, `arrow_scalar_us`/`memoryview_index_us`); the
answers themselves are opaque bytes either way, and the layout is readable from any language.

Lookup CPU is process CPU time (`time.process_time`) over an in-process loop, so another load on
the host slows it less than wall time would; each stage has a time limit. Not part of
`./run.sh bench`: a decision's measurement, run by hand (docs/scaling.md's decision record).
"""

from __future__ import annotations

import argparse
import array
import bisect
import json
import mmap
import os
import random
import resource
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MAGIC = b"NSCUT001"
# magic, snapshot id, topics, distinct bodies, slots; then (offset, length) of each section
SECTIONS = ("hashes", "body_idx", "name_off", "names", "slots", "body_off", "bodies", "cluster_info", "rest")
HEADER = struct.Struct("<8sqQQQ" + "QQ" * len(SECTIONS))
LOOKUPS = 100_000
STAGE_TIMEOUT_S = 600.0
ALL_TOPICS_LIMIT_S = 240.0  # the "every topic asked once" stage stops here (and says how far it got)
MIB = 1 << 20


def topic_hash(key: bytes) -> int:
    """64 bits of a topic name, the same in every process (Python's `hash` is salted per process):
    CRC-32 in the low half (the open-addressing slot comes from it), Adler-32 in the high half.
    Not collision-free, so a probe always compares the name too; about 0.4 µs here, a third of
    blake2b's."""
    return zlib.crc32(key) | (zlib.adler32(key) << 32)


# ---------------------------------------------------------------- /proc


def memory(pid: int, mapped: Path | None = None) -> dict[str, float]:
    """PSS, its anonymous and file parts, USS and RSS of a process, MiB (smaps_rollup); and with
    `mapped`, `pss_cut`: the PSS of that file's mapping (smaps). A library's pages are shared
    with every process on the host that maps it, so `pss_file` moves with whatever else runs;
    `pss_anon` + `pss_cut` is what the cut costs."""
    kb: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, _, rest = line.partition(":")
        kb[name] = int(rest.split()[0])
    out = {"pss": kb["Pss"] / 1024, "pss_anon": kb.get("Pss_Anon", 0) / 1024, "pss_file": kb.get("Pss_File", 0) / 1024,
           "uss": (kb["Private_Clean"] + kb["Private_Dirty"]) / 1024, "rss": kb["Rss"] / 1024}
    if mapped is not None:
        cut, inside = 0, False
        for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
            first = line.split(maxsplit=1)[0]
            if "-" in first and not first.endswith(":"):  # a mapping's header line
                inside = line.rstrip().endswith(str(mapped))
            elif inside and first == "Pss:":
                cut += int(line.split()[1])
        out["pss_cut"] = cut / 1024
    return out


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------- the shared file


def _row_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["brokerName"], row["perm"], row["readQueueNums"], row["topicSysFlag"], row["writeQueueNums"])


def write_shared_file(snap: Any, queues: Any, rest: dict[str, Any], path: Path) -> dict[str, Any]:
    """The cut's encoded answers to `path` (replaced atomically): every topic's route body, stored
    once per distinct body, the cluster info body, and the topic index. `snap` is the loaded cut
    (`routeinfo.snapshot.Snapshot`), `queues` its topic_queue as an Arrow table, `rest` its `snapshots` row and other tables' rows
    (JSON in the file: a reader builds the rest of the cut from them without reading Delta).

    A route body depends on the topic's QueueDatas and, through them, on the brokers' data, the
    filter servers and the switches; on the topic's name only for the sync-member prefix and an
    order-topic config. Topics alike in those share one encoding: the body is built by the
    project's own `route_reads.topic_route` for one topic of each kind."""
    import numpy as np

    from routeinfo import route_reads
    from schemas import events as ev

    started, cpu = time.perf_counter(), time.process_time()
    order_conf = snap.kv.get(ev.ORDER_TOPIC_CONFIG, {}) if snap.switches["orderMessageEnable"] else {}
    rows: dict[str, list[tuple[Any, ...]]] = {}
    table = queues.sort_by([("topic", "ascending"), ("brokerName", "ascending")])
    for batch in table.to_batches(max_chunksize=65536):
        for row in batch.to_pylist():
            rows.setdefault(row["topic"], []).append(_row_key(row))
    kinds: dict[tuple[Any, ...], int] = {}
    bodies: list[bytes] = []
    names: list[bytes] = []
    body_of: list[int] = []
    plain_bytes = 0  # the body area without deduplication
    for topic, queue_rows in rows.items():
        special = topic.startswith(route_reads.SYNC_BROKER_MEMBER_PREFIX) or topic in order_conf
        kind = (tuple(queue_rows), topic if special else None)
        index = kinds.get(kind)
        if index is None:
            body = route_reads.route_body(snap, topic)
            index = kinds[kind] = -1 if body is None else len(bodies)
            if body is not None:
                bodies.append(body)
        if index < 0:
            continue  # TOPIC_NOT_EXIST: no broker data for its queues
        names.append(topic.encode())
        body_of.append(index)
        plain_bytes += len(bodies[index])
    grouped_s = time.perf_counter() - started

    n = len(names)
    hashes = np.fromiter((topic_hash(k) for k in names), dtype=np.uint64, count=n)
    order = np.argsort(hashes, kind="stable")
    hashes = hashes[order]
    names = [names[i] for i in order]
    body_idx = np.asarray(body_of, dtype=np.uint32)[order]
    name_off = np.zeros(n + 1, dtype=np.uint32)
    name_off[1:] = np.cumsum([len(k) for k in names])
    capacity = 1 << max(1, (2 * n - 1).bit_length())  # load factor at most a half
    mask = capacity - 1
    slots = array.array("I", bytes(4 * capacity))  # entry + 1; 0 = empty
    for e, h in enumerate(hashes.tolist()):
        s = h & mask
        while slots[s]:
            s = (s + 1) & mask
        slots[s] = e + 1
    body_off = np.zeros(len(bodies) + 1, dtype=np.uint64)
    body_off[1:] = np.cumsum([len(b) for b in bodies])
    parts: dict[str, bytes] = {
        "hashes": hashes.tobytes(), "body_idx": body_idx.tobytes(), "name_off": name_off.tobytes(),
        "names": b"".join(names), "slots": slots.tobytes(), "body_off": body_off.tobytes(),
        "bodies": b"".join(bodies), "cluster_info": route_reads.cluster_info_body(snap),
        "rest": json.dumps(rest, separators=(",", ":")).encode()}
    layout: list[int] = []
    at = HEADER.size
    for name in SECTIONS:
        at = (at + 7) & ~7  # every section 8-aligned, for memoryview.cast
        layout += [at, len(parts[name])]
        at += len(parts[name])
    tmp = path.with_suffix(".tmp")
    with tmp.open("wb") as f:
        f.write(HEADER.pack(MAGIC, snap.snapshot_id or 0, n, len(bodies), capacity, *layout))
        for name, off in zip(SECTIONS, layout[::2], strict=True):
            f.write(b"\0" * (off - f.tell()))
            f.write(parts[name])
    os.replace(tmp, path)
    return {"build_s": time.perf_counter() - started, "build_cpu_s": time.process_time() - cpu,
            "group_and_encode_s": grouped_s, "topics": n, "distinct_bodies": len(bodies),
            "file_mib": path.stat().st_size / MIB, "section_mib": {k: len(v) / MIB for k, v in parts.items()},
            "bodies_without_dedup_mib": plain_bytes / MIB,
            "index_in_file_mib": sum(len(parts[k]) for k in ("hashes", "body_idx", "name_off", "names", "slots",
                                                             "body_off")) / MIB}


class SharedCut:
    """A cut's encoded answers, mapped: lookups return memoryview slices of the file."""

    def __init__(self, path: Path) -> None:
        with path.open("rb") as f:
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        mv = memoryview(self._mm)
        magic, self.snapshot_id, self.topics, self.distinct_bodies, capacity, *layout = HEADER.unpack_from(mv)
        if magic != MAGIC:
            raise ValueError(f"{path}: not a cut file")
        sec = {name: mv[off:off + size] for name, off, size in zip(SECTIONS, layout[::2], layout[1::2], strict=True)}
        self.view = mv
        self._hashes = sec["hashes"].cast("Q")
        self._body_idx = sec["body_idx"].cast("I")
        self._name_off = sec["name_off"].cast("I")
        self._names = sec["names"]
        self._slots = sec["slots"].cast("I")
        self._mask = capacity - 1
        self._body_off = sec["body_off"].cast("Q")
        self.bodies = sec["bodies"]
        self.cluster_info = sec["cluster_info"]
        self.rest = sec["rest"]

    def _body(self, e: int) -> memoryview:
        b = self._body_idx[e]
        return self.bodies[self._body_off[b]:self._body_off[b + 1]]

    def route_body(self, topic: str) -> memoryview | None:
        """Open addressing: the slot from the hash's low bits, linear probing, the name compared."""
        key = topic.encode()
        h = topic_hash(key)
        slots, hashes, name_off, names = self._slots, self._hashes, self._name_off, self._names
        s = h & self._mask
        while True:
            e = slots[s]
            if not e:
                return None
            e -= 1
            if hashes[e] == h and names[name_off[e]:name_off[e + 1]] == key:
                return self._body(e)
            s = (s + 1) & self._mask

    def route_body_sorted(self, topic: str) -> memoryview | None:
        """Binary search over the sorted hashes (bisect on the file's memoryview), the name compared."""
        key = topic.encode()
        h = topic_hash(key)
        hashes, name_off, names = self._hashes, self._name_off, self._names
        e = bisect.bisect_left(hashes, h)  # a memoryview is a sequence of ints
        while e < self.topics and hashes[e] == h:
            if names[name_off[e]:name_off[e + 1]] == key:
                return self._body(e)
            e += 1
        return None

    def as_dict(self) -> dict[str, tuple[int, int]]:
        """topic -> (start, end) in the bodies section: the index as a Python dict."""
        out: dict[str, tuple[int, int]] = {}
        names, name_off, body_idx, body_off = self._names, self._name_off, self._body_idx, self._body_off
        for e in range(self.topics):
            b = body_idx[e]
            out[str(names[name_off[e]:name_off[e + 1]], "utf-8")] = (body_off[b], body_off[b + 1])
        return out

    def touch(self) -> int:
        """Read every page of the mapping (a reader that has served long has touched them all)."""
        total = 0
        for off in range(0, len(self.view), mmap.PAGESIZE):
            total += self.view[off]
        return total


# ---------------------------------------------------------------- children


def _say(stage: str, **fields: Any) -> None:
    print(json.dumps({"stage": stage, "pid": os.getpid(), **fields}), flush=True)


def _wait() -> None:
    if not sys.stdin.readline():
        sys.exit(0)


def _sample(groups: int, topics: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    return [f"BenchTopic-{rnd.randrange(groups)}-{rnd.randrange(topics)}" for _ in range(LOOKUPS)]


def _time_lookups(lookup: Any, sample: list[str]) -> float:
    """µs of process CPU per lookup over `sample`; every topic must be found."""
    cpu = time.process_time()
    found = 0
    for topic in sample:
        if lookup(topic) is not None:
            found += 1
    spent = time.process_time() - cpu
    if found != len(sample):
        raise AssertionError(f"{len(sample) - found} of {len(sample)} topics not found")
    return 1e6 * spent / len(sample)


def _serving_imports() -> None:
    """What the remoting front's process imports, so that every child starts from the same base."""
    import remoting.front  # noqa: F401
    import snapshots.reader  # noqa: F401


def child_today(args: argparse.Namespace) -> None:
    """A serving process as today: the whole cut loaded and indexed in the process."""
    sample = _sample(args.groups, args.topics, args.seed)  # in every child's base alike
    _serving_imports()
    from conf.memory import release_memory
    from routeinfo import route_reads
    from snapshots.reader import SnapshotReader
    _say("imported")
    _wait()
    reader = SnapshotReader(Path(args.warehouse))
    started, cpu = time.perf_counter(), time.process_time()
    row = reader.newest_row()
    assert row is not None
    snap = reader.load(row)
    load_s, load_cpu_s = time.perf_counter() - started, time.process_time() - cpu
    release_memory(collect=False)  # as SnapshotStore does after a large topic_queue reload
    _say("loaded", load_s=load_s, load_cpu_s=load_cpu_s)
    _wait()
    cold = _time_lookups(lambda tp: route_reads.route_body(snap, tp), sample)
    warm = _time_lookups(lambda tp: route_reads.route_body(snap, tp), sample)
    _say("looked_up", cold_us=cold, warm_us=warm, cached_bodies=len(snap.route_bodies))
    _wait()
    if args.all_topics:
        cpu = time.process_time()
        asked = 0
        for g in range(args.groups):
            for i in range(args.topics):
                route_reads.route_body(snap, f"BenchTopic-{g}-{i}")
            asked += args.topics
            if time.process_time() - cpu > ALL_TOPICS_LIMIT_S:
                break
        _say("all_topics", asked=asked, cached_bodies=len(snap.route_bodies),
             cpu_s=time.process_time() - cpu)
        _wait()


def _rest_from_delta(warehouse: Path) -> Any:
    """The cut but its topic_queue, read from Delta as `snapshots.reader` reads it."""
    from deltalake import DeltaTable

    from routeinfo.snapshot import ROW_ORDER, build_snapshot
    from schemas import tables as t
    from snapshots.reader import SnapshotReader, python_rows
    row = SnapshotReader(warehouse).newest_row()
    assert row is not None
    tables: dict[str, Any] = {t.TOPIC_QUEUE.name: []}
    for table in t.STATE_TABLES:
        if table is not t.TOPIC_QUEUE:
            arrow = DeltaTable(str(warehouse / table.name), version=row[t.version_column(table)]).to_pyarrow_table()
            tables[table.name] = python_rows(arrow, ROW_ORDER.get(table.name, ()))
    return build_snapshot(row, tables)


def _rest_from_file(cut: SharedCut) -> Any:
    """The cut but its topic_queue, from the rows the builder put in the file (no Delta read, and
    no Arrow: the first Arrow table a process builds costs it about 25 MiB, measured here)."""
    from routeinfo.snapshot import build_snapshot
    from routeinfo.topic_index import TopicIndex
    from schemas import tables as t

    class FileTopics(TopicIndex):  # the topics are the file's: no Arrow index in the process
        def __init__(self) -> None:
            pass

    rest = json.loads(bytes(cut.rest))
    return build_snapshot(rest["row"], {t.TOPIC_QUEUE.name: FileTopics(), **rest["tables"]})


def child_shared(args: argparse.Namespace) -> None:
    """A serving process over the shared file: the answers mapped, the rest of the cut in Python
    (from the file, or read from Delta with `--rest delta`). With `--fork N` the process forks
    N - 1 more after mapping and loading (a pre-forking supervisor's SO_REUSEPORT fronts: the
    interpreter's imported modules and the rest of the cut shared copy-on-write), and all run on
    without waiting between stages."""
    sample = _sample(args.groups, args.topics, args.seed)  # in every child's base alike
    _serving_imports()
    from routeinfo import route_reads
    forked = args.fork > 1
    _say("imported")
    if not forked:
        _wait()
    started, cpu = time.perf_counter(), time.process_time()
    cut = SharedCut(Path(args.file))
    map_s, map_cpu_s = time.perf_counter() - started, time.process_time() - cpu
    started, cpu = time.perf_counter(), time.process_time()
    rest = _rest_from_delta(Path(args.warehouse)) if args.rest == "delta" else _rest_from_file(cut)
    rest_s, rest_cpu_s = time.perf_counter() - started, time.process_time() - cpu
    if cut.snapshot_id != rest.snapshot_id:
        raise AssertionError(f"file of cut {cut.snapshot_id}, tables of {rest.snapshot_id}")
    kids: list[int] = []
    root = os.getpid()
    if forked:
        import gc
        gc.freeze()  # the imported modules and the rest of the cut out of the collector's walks
        for _ in range(args.fork - 1):
            pid = os.fork()
            if pid == 0:
                kids = []
                break
            kids.append(pid)
    touched = time.perf_counter()
    cut.touch()
    touch_s = time.perf_counter() - touched
    open_us = _time_lookups(cut.route_body, sample)
    sorted_us = _time_lookups(cut.route_body_sorted, sample)
    missing = [tp for tp in ("NoSuchTopic", "BenchTopic-x-0", "") if cut.route_body(tp) is not None
               or cut.route_body_sorted(tp) is not None]
    if missing:
        raise AssertionError(f"found topics that do not exist: {missing}")
    if bytes(cut.cluster_info) != route_reads.cluster_info_body(rest):
        raise AssertionError("the file's cluster info is not the cut's")
    _say("mapped", map_s=map_s, map_cpu_s=map_cpu_s, rest_s=rest_s, rest_cpu_s=rest_cpu_s, brokers=len(rest.brokers),
         touch_s=touch_s, open_addressing_us=open_us, sorted_hashes_us=sorted_us)
    if forked:
        sys.stdin.readline()  # every process of the group ends at the parent's EOF
        for pid in kids:
            os.waitpid(pid, 0)
        if os.getpid() != root:
            os._exit(0)
        return
    _wait()
    if args.dict_index:
        from conf.memory import release_memory
        release_memory(collect=False)
        before = memory(os.getpid())["uss"]
        started, cpu = time.perf_counter(), time.process_time()
        index = cut.as_dict()
        dict_s, dict_cpu_s = time.perf_counter() - started, time.process_time() - cpu
        bodies = cut.bodies

        def lookup(topic: str) -> memoryview | None:
            span = index.get(topic)
            return None if span is None else bodies[span[0]:span[1]]
        dict_us = _time_lookups(lookup, sample)
        _say("dict_index", dict_s=dict_s, dict_cpu_s=dict_cpu_s, dict_us=dict_us, entries=len(index),
             dict_uss_mib=memory(os.getpid())["uss"] - before)
        _wait()


def child_build(args: argparse.Namespace) -> None:
    """The builder: load the cut as today, write the shared file, check it against the cut."""
    from deltalake import DeltaTable

    from routeinfo import route_reads
    from schemas import tables as t
    from snapshots.reader import SnapshotReader
    reader = SnapshotReader(Path(args.warehouse))
    row = reader.newest_row()
    assert row is not None
    started = time.perf_counter()
    snap = reader.load(row)
    load_s = time.perf_counter() - started
    def table_at(table: t.TableDef) -> Any:
        return DeltaTable(str(Path(args.warehouse) / table.name), version=row[t.version_column(table)]).to_pyarrow_table()
    rest = {"row": row, "tables": {x.name: table_at(x).to_pylist() for x in t.STATE_TABLES if x is not t.TOPIC_QUEUE}}
    out = write_shared_file(snap, table_at(t.TOPIC_QUEUE), rest, Path(args.file))
    cut = SharedCut(Path(args.file))
    rnd = random.Random(args.seed + 1)
    checked = rnd.sample(list(snap.topics), 2000)
    for topic in checked:
        expected = route_reads.route_body(snap, topic)
        if bytes(cut.route_body(topic) or b"") != expected or bytes(cut.route_body_sorted(topic) or b"") != expected:
            raise AssertionError(f"{topic}: the file's body is not route_reads.route_body's")
    if bytes(cut.cluster_info) != route_reads.cluster_info_body(snap):
        raise AssertionError("the file's cluster info is not route_reads.cluster_info_body's")
    # why the file is not Arrow IPC: a scalar out of an Arrow array against an int out of a memoryview
    import pyarrow as pa
    view = cut._hashes
    hashes = pa.array(list(view), pa.uint64())
    picks = [rnd.randrange(len(view)) for _ in range(LOOKUPS)]
    cpu = time.process_time()
    for i in picks:
        hashes[i].as_py()
    arrow_us = 1e6 * (time.process_time() - cpu) / LOOKUPS
    cpu = time.process_time()
    for i in picks:
        view[i]
    view_us = 1e6 * (time.process_time() - cpu) / LOOKUPS
    _say("built", load_s=load_s, checked=len(checked), peak_rss_mib=peak_rss_mib(), arrow_scalar_us=arrow_us,
         memoryview_index_us=view_us, **out)


# ---------------------------------------------------------------- the parent


class Child:
    """A child process speaking one JSON line per stage on stdout; it goes on when told to."""

    def __init__(self, mode: str, args: argparse.Namespace, *extra: str) -> None:
        cmd = [sys.executable, "-m", "bench.cut_sharing", "--child", mode, "--warehouse", str(args.warehouse),
               "--file", str(args.file), "--groups", str(args.groups), "--topics", str(args.topics),
               "--seed", str(args.seed), *extra]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._buf = b""

    def stage(self, timeout_s: float = STAGE_TIMEOUT_S) -> dict[str, Any] | None:
        """The next stage's line, or None once the child ended; raises past `timeout_s`."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.proc.kill()
                raise TimeoutError(f"child {self.proc.pid}: no stage within {timeout_s:.0f} s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    if self.proc.wait() != 0:
                        raise RuntimeError(f"child {self.proc.pid} failed ({self.proc.returncode})")
                    return None
                self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        found: dict[str, Any] = json.loads(line)
        return found

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"\n")
        self.proc.stdin.flush()

    def end(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def run_group(mode: str, n: int, args: argparse.Namespace, *extra: str) -> list[dict[str, Any]]:
    """`n` children in lock step: at each stage, every child's own figures and memory, read while
    all `n` are alive; the stage's total PSS is the sum over the children."""
    children = [Child(mode, args, *extra) for _ in range(n)]
    stages: list[dict[str, Any]] = []
    try:
        while True:
            said = [s for s in (c.stage() for c in children) if s is not None]
            if len(said) < n:
                break
            mem = [memory(c.proc.pid, args.file) for c in children]
            stage = {"stage": said[0]["stage"], "processes": n,
                     "pss_total_mib": sum(m["pss"] for m in mem), "per_process": [
                         {**{k: v for k, v in s.items() if k not in ("stage", "pid")}, **m}
                         for s, m in zip(said, mem, strict=True)]}
            stages.append(stage)
            print(f"  {mode} ×{n} {stage['stage']}: PSS {stage['pss_total_mib']:.0f} MiB in all; "
                  + "; ".join(_brief(p) for p in stage["per_process"]), flush=True)
            for c in children:
                c.go()
    finally:
        for c in children:
            c.end()
    return stages


def run_forked(n: int, args: argparse.Namespace) -> dict[str, Any]:
    """One reader that forks `n` - 1 more once it has mapped the file and built the rest of the cut:
    every process's figures and memory once all `n` have looked up."""
    child = Child("shared", args, "--fork", str(n))
    mapped: dict[int, dict[str, Any]] = {}
    try:
        while len(mapped) < n:
            said = child.stage()
            if said is None:
                raise RuntimeError("a forked reader ended early")
            if said["stage"] == "mapped":
                mapped[said["pid"]] = said
        mem = {pid: memory(pid, args.file) for pid in mapped}
    finally:
        child.end()
    per_process = [{**{k: v for k, v in s.items() if k not in ("stage", "pid")}, **mem[pid]} for pid, s in mapped.items()]
    total = sum(m["pss"] for m in mem.values())
    print(f"  shared, forked ×{n}: PSS {total:.0f} MiB in all; " + "; ".join(_brief(p) for p in per_process), flush=True)
    return {"stage": "mapped", "processes": n, "pss_total_mib": total, "per_process": per_process}


def _brief(p: dict[str, Any]) -> str:
    skip = {"rss", "per_process", "section_mib"}
    return ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in p.items() if k not in skip)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cut_sharing", description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--workdir", type=Path, help="kept, and its warehouse reused when present (default: a "
                                                     "temporary directory, removed at the end)")
    parser.add_argument("--readers", default="1,2,4", help="shared-file reader counts")
    parser.add_argument("--today", default="1,2", help="today's process counts")
    parser.add_argument("--no-all-topics", action="store_true", help="skip today's every-topic-asked stage")
    parser.add_argument("--out", type=Path, help="the figures as JSON")
    parser.add_argument("--seed", type=int, default=36)
    parser.add_argument("--child", choices=("today", "shared", "build"), help=argparse.SUPPRESS)
    parser.add_argument("--warehouse", help=argparse.SUPPRESS)
    parser.add_argument("--file", help=argparse.SUPPRESS)
    parser.add_argument("--all-topics", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dict-index", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rest", choices=("file", "delta"), default="file", help=argparse.SUPPRESS)
    parser.add_argument("--fork", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        {"today": child_today, "shared": child_shared, "build": child_build}[args.child](args)
        return 0

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-cut-sharing-"))
    workdir.mkdir(parents=True, exist_ok=True)
    args.warehouse, args.file = workdir / "delta", workdir / "cut.bin"
    results: dict[str, Any] = {"groups": args.groups, "topics": args.topics, "lookups": LOOKUPS,
                               "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                               "cores": os.cpu_count(), "loadavg_at_start": os.getloadavg()}
    try:
        if not (args.warehouse / "snapshots").exists():
            from bench.pure import write_warehouse
            started = time.perf_counter()
            write_warehouse(workdir, args.groups, args.topics)
            results["warehouse_write_s"] = time.perf_counter() - started
            print(f"warehouse of {args.groups} × {args.topics} written in {results['warehouse_write_s']:.1f} s",
                  flush=True)
        builder = Child("build", args)
        built = builder.stage()
        builder.end()
        assert built is not None
        results["build"] = {k: v for k, v in built.items() if k not in ("stage", "pid")}
        print("  build: " + _brief(results["build"]), flush=True)
        results["today"] = {n: run_group("today", n, args, *([] if n > 1 or args.no_all_topics else ["--all-topics"]))
                            for n in map(int, args.today.split(","))}
        readers = [int(n) for n in args.readers.split(",")]
        results["shared"] = {n: run_group("shared", n, args, *(["--dict-index"] if n == 1 else [])) for n in readers}
        results["shared_rest_from_delta"] = run_group("shared", 1, args, "--rest", "delta")
        results["shared_forked"] = {n: run_forked(n, args) for n in readers if n > 1}
        results["loadavg_at_end"] = os.getloadavg()
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    text = json.dumps(results, indent=1, default=str)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
