"""One file of pre-encoded answers per cut, shared by every serving process on a host (issue 36).

Each serving process used to hold its own copy of the cut and encode a topic's route body on its
first lookup in every cut; docs/scaling.md's decision record (2026-11-27) measured that and chose
one file per cut, written once by a builder and mapped (`mmap`) read-only by every process: a
route lookup is an open-addressing probe over the file and a `memoryview` slice of it, no Python
object per topic in any reader. This module is that file's format, its writer (`write_cut`) and
its reader (`CutFile`).

What the files hold
-------------------
A cut is two files in one directory (`<data dir>/cuts/`): an *index part* with everything a route
answer is made of, which changes only when the routes do, and a small *head*, `current.cut`,
with the rest of the cut, which changes with every cut (a heartbeat moves broker_live). A cut
that changes no route (liveness only: lastUpdateTimestamp, the snapshot id and commit time moved)
writes only a new head naming the index part the last one named, and a reader that maps that
part already reads only the new head (`CutFile.open(path, reuse=...)`): at 10,000 groups × 100
topics the index part is most of 50-70 MiB, the head a few MiB.

The index part, `index-<hex>.idx`, named after its content (`index_name`: a BLAKE2b of the three
digests below, which fix every byte of it), holds:

* Every topic of the cut's `topic_queue`, in name order (UTF-8 byte order, which is code point
  order: `sorted(snap.topics)`), each with the number of its route body, or none when RocketMQ
  answers TOPIC_NOT_EXIST (queue rows but no BrokerData for any of them).
* Each distinct route body once (deduplicated by content), exactly `route_reads.route_body(snap,
  topic)`: the TopicRouteData as `route_reads.topic_route` builds it with no zone, so the
  acting-master rewrite (the cut's `supportActingMaster`, not for sync-member topics) and the
  order-topic config (the cut's `orderMessageEnable` and its ORDER_TOPIC_CONFIG namespace) are
  applied, and the zone filter is NOT: a lookup with `__ZONE_MODE`/`__ZONE_NAME` decodes the
  file's body and applies `_zone_filter` at request time.
* Per broker group (each `brokerName` of `topic_queue`, in name order), the entries of the topics
  it holds a queue row of: the writes' checks of a group's topics, without the Arrow index.
* What an incremental write needs to reuse this part's work safely (below).

The head holds the snapshot id and commit time, the index part's three digests (so its name), its
size and CRC-32, and:

* `route_reads.cluster_info_body(snap)`. It is the head's, not the index part's: it reads
  cluster_addr, which no digest of the index part covers, and at about 100 bytes a broker it is a
  small share of a head that the live table's rows make several MiB anyway.
* The rest of the cut as JSON, from which `CutFile.rest_snapshot` builds the Snapshot minus its
  topic_queue with `routeinfo.snapshot.build_snapshot` (no Delta, no Arrow), in two sections:
  `tables`, what a heartbeat does not move, `{"tables": {table: rows}, "orphanQueues": ...}`
  with the rows of broker_addr, cluster_addr, filter_server, kv_config and namesrv_config as the
  Snapshot holds them, its BLAKE2b-128 in the header (`tables_digest`); and `live`,
  `{"snapshot": row, "broker_live": rows}`, `row` the `snapshots` columns a Snapshot keeps
  (snapshotId, commitTime, the `<table>_version` columns, sourceOffsets) or null for a cut with
  no row. A Snapshot does not keep everything its Delta rows had, so neither does the file:
  filter_server rows carry no `brokerName`, namesrv_config holds every runtime switch (defaults
  included, scope "namesrv"), and the `snapshots` row has no batchId or eventCount.
  `"orphanQueues"`: the QueueDatas of the topics without a route body, the one thing about a
  topic its body cannot tell (a body's `queueDatas` are the topic's whole), so a reader has every
  topic's QueueDatas from the files (`snapshots.mapped.FileTopics`).
  A reader whose served cut has the same `tables_digest` parses only `live` (a heartbeat's cut:
  `snapshots.mapped.mapped_snapshot`), and a builder that knows the cut it wrote last
  (`CutFile.written_from`) copies `tables` and the cluster info from that file when the cut's
  brokers, clusters, filter servers, KV and switches are those of that cut.

Layout (version 2): little-endian, fixed widths, every section 8-byte aligned
----------------------------------------------------------------------------
Both parts are a header, then sections at the (offset, length)s the header lists, offsets from
the part's start; each header ends with a CRC-32 (zlib's) of the header's bytes before it, then of
every byte after the header to the end of the part (padding included).

The head, `HEADER`, 176 bytes (struct format `<8sIIQqq16s16s16s16sQII` + 3 × `QQ` + `II`):

    magic        8 bytes  b"RMQNSCUT"
    version      u32      FORMAT_VERSION (2); a reader refuses any other
    header_size  u32      HEADER.size
    file_size    u64      the head's length (a shorter file is truncated)
    snapshot_id  i64      the cut's snapshotId, -1 for a cut with none (the empty cut)
    commit_time  i64      the cut's commitTime (ms since the epoch), -1 for none
    queue_digest 16 bytes BLAKE2b-128 of the topic_queue columns the index part was built from
    deps_digest  16 bytes BLAKE2b-128 of everything else a route body reads (brokers, filter
                          servers, the two switches, the order-topic configs)
    encoder      16 bytes BLAKE2b-128 of the code that encoded the bodies (`encoder_digest`)
    tables_digest 16 bytes BLAKE2b-128 of the `tables` section
    index_size   u64      the index part's length
    index_crc    u32      the index part's CRC-32 (its header's last field): the part the head
                          was written with, so a reader can tell that a part it maps is that one
    reserved     u32      0
    sections     3 × (offset u64, length u64): cluster_info, tables, live
    reserved     u32      0
    crc32        u32      the head's CRC-32

    cluster_info    bytes     the ClusterInfo body
    tables          bytes     the rest of the cut but the live table, JSON (UTF-8)
    live            bytes     the snapshots row and the live table, JSON (UTF-8)

The index part, `INDEX_HEADER`, 336 bytes (`<8sIIQQQQQQQ16s16s16s` + 13 × `QQ` + `II`):

    magic        8 bytes  b"RMQNSIDX"
    version      u32      FORMAT_VERSION
    header_size  u32      INDEX_HEADER.size
    file_size    u64      the part's length
    topics       u64      T, topic entries
    bodies       u64      B, distinct route bodies
    capacity     u64      C, open-addressing slots (a power of two, at least 2·T and 2)
    kinds        u64      K, kind keys (below)
    groups       u64      G, broker groups
    group_topics u64      R, (group, topic) pairs
    queue_digest, deps_digest, encoder: as the head's (a part must be the one its head names)
    sections     13 × (offset u64, length u64), in the order of INDEX_SECTIONS
    reserved     u32      0
    crc32        u32      the part's CRC-32

    hashes          u64[T]    topic_hash of each entry's UTF-8 name
    body_of         u32[T]    each entry's body number; 0xFFFFFFFF = no route (TOPIC_NOT_EXIST)
    name_off        u32[T+1]  entry e's name is names[name_off[e]:name_off[e+1]]
    names           bytes     the names, UTF-8, concatenated in entry order
    slots           u32[C]    entry + 1, 0 = empty; entry e's probe starts at hashes[e] & (C-1)
                              and goes on at the next slot (wrapping) until the name matches or
                              a slot is empty (the topic is not in the cut)
    body_off        u64[B+1]  body b is bodies[body_off[b]:body_off[b+1]]
    bodies          bytes     the distinct route bodies (JSON, as route_reads encodes them)
    kind_keys       16 bytes × K  BLAKE2b-128 of a body's inputs (one per distinct input)
    kind_body       u32[K]    the body those inputs encode to; 0xFFFFFFFF = no route
    group_name_off  u32[G+1]  as name_off, over group_names
    group_names     bytes     the broker group names, UTF-8, in order
    group_off       u32[G+1]  group g's topics are group_topics[group_off[g]:group_off[g+1]]
    group_topics    u32[R]    topic entry numbers, ascending within a group

Reading a cut: map the head, check it (its CRC with `verify`), then map the index part it names
and check that part (its CRC with `verify`, its digests, size and CRC field against the head's);
a reader given the CutFile it serves (`reuse`) shares that file's mapping of the part when the head
names the same one (same name, size and CRC, and verified if this open verifies), so a liveness
cut costs a reader the head alone. A head naming a part that is missing, or is not the one it was
written with, is refused (`IndexPartError`): no reader ever answers from a head and an index part
of different cuts.

Writing a cut: the index part (when it is written at all) is written and fsynced under a temporary
name, renamed to its name and the directory fsynced, all before the head is; the head is then
written the same way and renamed over `current.cut`. A reader that mapped the old head and its
part keeps both whole, whatever is renamed or removed after.

Removing old index parts: every cut whose routes changed leaves a new part, so the host's builder
(`snapshots.cutbuilder`, the directory's only writer) removes the older ones after each write
(`prune_index_parts`), keeping the part the head names and the last other part a head named
before it (a reader may be between reading the previous head and opening its part): at most two
parts at rest, three while a new one is written. A part removed while a reader maps it stays
mapped (Linux frees it with the last mapping); a reader that finds the part its head names gone
(two route changes while it looked: the builder writes a new head meanwhile) keeps its last cut
and tries again at its next refresh (`snapshots.store`).

`topic_hash(name)` is `crc32(name) | adler32(name) << 32` (zlib's CRC-32 and Adler-32 of the
UTF-8 bytes): both are in every language's standard library or a few lines, and in Python each
is one C call (about half a microsecond a lookup).

Incremental writes
------------------
A registration wave commits a cut every second or two; re-encoding a million topics for each was
the prototype's 14 s of CPU. `write_cut(snap, path, previous)` reuses the previous file's work
where its inputs are provably the same, at three levels, each keyed by digests of content (never
by table versions, which do not say what a file was built from):

1. the previous file's queue, deps and encoder digests are this cut's: the index part is the
   previous one, named by the new head as it is (and not written again when the previous cut's
   part is the very file at the name, same inode; written from the previous mapping when not,
   such as a head written into another directory); nothing is grouped or encoded;
2. otherwise the hashes of names the previous file has are taken from it (an Arrow join of the
   names), and its slots too when the names are the same;
3. a kind of topic (same queue rows, and the same sync-member/order-config treatment) whose
   kind key the previous file has gets that file's body, not a new encoding; the kind key hashes
   everything `topic_route` reads for it (queue rows, BrokerDatas, filter servers, switches,
   order config), so equal keys mean equal bodies.

The encoder digest covers this module and the route_reads, topic_index and snapshot modules'
sources, so a builder restarted on changed code never carries old encodings forward. The result
is byte-identical to a from-scratch write of the same cut (the tests check it, both parts): every
section is a function of the cut alone, numbered by first appearance in name order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import mmap
import os
import struct
import sys
import threading
import time
import zlib
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from routeinfo import route_reads
from routeinfo import snapshot as snapshot_module
from routeinfo import topic_index as topic_index_module
from routeinfo.snapshot import Snapshot, build_snapshot
from routeinfo.topic_index import TopicIndex
from schemas import events as ev
from schemas import json_codec
from schemas import tables as t

MAGIC = b"RMQNSCUT"  # the head's
INDEX_MAGIC = b"RMQNSIDX"  # an index part's
ORPHANS = "orphanQueues"  # the rest's key of the QueueDatas of topics without a route body
FORMAT_VERSION = 2
NO_BODY = 0xFFFFFFFF
NO_ID = -1  # snapshot_id / commit_time of a cut without a snapshots row
# the index part's sections: everything keyed by the queue, deps and encoder digests
INDEX_SECTIONS = ("hashes", "body_of", "name_off", "names", "slots", "body_off", "bodies", "kind_keys", "kind_body",
                  "group_name_off", "group_names", "group_off", "group_topics")
HEAD_SECTIONS = ("cluster_info", "tables", "live")
SECTIONS = INDEX_SECTIONS + HEAD_SECTIONS
HEADER = struct.Struct("<8sIIQqq16s16s16s16sQII" + "QQ" * len(HEAD_SECTIONS) + "II")
INDEX_HEADER = struct.Struct("<8sIIQQQQQQQ16s16s16s" + "QQ" * len(INDEX_SECTIONS) + "II")
DIGEST_BYTES = 16
INDEX_PREFIX, INDEX_SUFFIX = "index-", ".idx"

U8 = npt.NDArray[np.uint8]
U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
Section = bytes | memoryview


class CutFileError(Exception):
    """A cut file that cannot be trusted (wrong magic or version, truncated, corrupted): the
    message says which file and what is wrong. A reader refuses it rather than answer from it."""


class IndexPartError(CutFileError):
    """A sound head whose index part is missing, damaged or not the one the head was written with.
    `index_path` is that part: a reader tries again when it or the head changes."""

    def __init__(self, index_path: Path, message: str) -> None:
        super().__init__(message)
        self.index_path = index_path


def index_name(queue_digest: bytes, deps_digest: bytes, encoder: bytes) -> str:
    """The index part's file name: a digest of the three digests that fix its every byte, so equal
    names mean equal content and a head's part is found by name."""
    key = hashlib.blake2b(queue_digest + deps_digest + encoder, digest_size=DIGEST_BYTES).hexdigest()
    return f"{INDEX_PREFIX}{key}{INDEX_SUFFIX}"


def topic_hash(key: bytes) -> int:
    """64 bits of a UTF-8 topic name, the same in every process and language (Python's `hash` is
    salted per process): CRC-32 in the low half, where the slot comes from, Adler-32 in the high
    half. Not collision-free, so a probe compares the name too."""
    return zlib.crc32(key) | (zlib.adler32(key) << 32)


# ---------------------------------------------------------------- vectorized pieces


def _crc_table() -> U32:
    c = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        c = np.where(c & 1, (c >> 1) ^ np.uint32(0xEDB88320), c >> 1).astype(np.uint32)
    return c


def _string_parts(names: Any) -> tuple[I64, U8]:
    """Zero-based offsets and the bytes of an Arrow string array (its own slice of the buffers)."""
    n = len(names)
    offsets = np.frombuffer(names.buffers()[1], dtype=np.int32, count=n + 1, offset=4 * names.offset).astype(np.int64)
    data_buffer = names.buffers()[2]
    data = np.zeros(0, np.uint8) if data_buffer is None else np.frombuffer(data_buffer, dtype=np.uint8)
    data = data[offsets[0]:offsets[-1]]
    return offsets - offsets[0], data


def hash_names(names: Any) -> U64:
    """`topic_hash` of every name of an Arrow string array, computed a byte position at a time
    over all names at once (a Python call per name cost four times as much at a million)."""
    offsets, data = _string_parts(names)
    n = len(offsets) - 1
    if n == 0:
        return np.zeros(0, np.uint64)
    starts, lengths = offsets[:-1], offsets[1:] - offsets[:-1]
    order = np.argsort(-lengths, kind="stable")  # longest first: the names still going are a prefix
    starts, lengths = starts[order], lengths[order]
    going = np.searchsorted(-lengths, -np.arange(1, int(lengths[0]) + 1), side="right")
    table = _crc_table()
    crc = np.full(n, 0xFFFFFFFF, np.uint32)
    a = np.ones(n, np.uint64)
    b = np.zeros(n, np.uint64)  # no overflow below names of about 2^28 bytes
    for j, k in enumerate(going.tolist()):
        byte = data[starts[:k] + j]
        c = crc[:k]
        crc[:k] = table[(c ^ byte) & 0xFF] ^ (c >> 8)
        a[:k] += byte
        b[:k] += a[:k]
    crc ^= np.uint32(0xFFFFFFFF)
    hashes = crc.astype(np.uint64) | (((b % 65521) << np.uint64(16) | (a % 65521)) << np.uint64(32))
    out = np.empty(n, np.uint64)
    out[order] = hashes
    return out


def build_slots(hashes: U64, capacity: int) -> U32:
    """The open-addressing table of `hashes` with linear probing, in one pass of numpy: entries
    by home slot, each at the first slot past its predecessor's (a running maximum); those run
    past the end wrap to the first empty slots from 0, which a probe reaches after the end."""
    n = len(hashes)
    slots = np.zeros(capacity, np.uint32)
    if n == 0:
        return slots
    home = (hashes & np.uint64(capacity - 1)).astype(np.int64)
    order = np.argsort(home, kind="stable")
    steps = np.arange(n, dtype=np.int64)
    at = np.maximum.accumulate(home[order] - steps) + steps
    fits = at < capacity
    slots[at[fits]] = (order[fits] + 1).astype(np.uint32)
    wrapped = order[~fits]
    if len(wrapped):
        slots[np.flatnonzero(slots == 0)[:len(wrapped)]] = (wrapped + 1).astype(np.uint32)
    return slots


def slot_capacity(topics: int) -> int:
    """A power of two at least twice the topics (load at most a half: misses end soon)."""
    capacity = 2
    while capacity < 2 * topics:
        capacity *= 2
    return capacity


# ---------------------------------------------------------------- what the writer reads


@dataclasses.dataclass(frozen=True)
class _Queues:
    """A cut's topic_queue as numpy columns, rows by topic then brokerName (as a route lists them)."""

    names: Any                 # Arrow string array: the distinct topics, sorted
    starts: I64                # T + 1: topic i's rows are [starts[i], starts[i+1])
    broker_rank: I64           # per row: its brokerName's rank in `brokers`
    ints: I64                  # per row: perm, readQueueNums, topicSysFlag, writeQueueNums
    rows: I64                  # per row: its index in the TopicIndex's own order
    brokers: list[str]         # sorted brokerNames of topic_queue
    source: tuple[Any, ...]    # the TopicIndex's columns, to build a small index of a few topics


def _index_columns(index: TopicIndex) -> tuple[Any, list[str], Any, dict[str, Any]]:
    """The TopicIndex's sorted Arrow topic column, its brokerName dictionary and codes, and its
    integer columns: the writer works over the whole table without a Python row per queue."""
    cols = index.columns()
    topic = cols.topic
    if topic.type != pa.string():
        topic = topic.cast(pa.string())
    return topic, cols.brokers, cols.broker_codes, dict(cols.ints)


def _queues(index: TopicIndex) -> _Queues:
    topic, brokers, codes, ints = _index_columns(index)
    n = len(topic)
    fields = topic_index_module.QUEUE_FIELDS[1:]
    if n == 0:
        empty = np.zeros(0, np.int64)
        return _Queues(pa.array([], pa.string()), np.zeros(1, np.int64), empty, np.zeros((0, len(fields)), np.int64),
                       empty, [], (topic, brokers, codes, ints))
    new = np.ones(n, bool)
    if n > 1:
        new[1:] = np.asarray(pc.not_equal(topic.slice(1), topic.slice(0, n - 1)).to_numpy(zero_copy_only=False))
    starts = np.append(np.flatnonzero(new), n).astype(np.int64)
    topic_of_row = np.repeat(np.arange(len(starts) - 1), np.diff(starts))
    by_name = sorted(range(len(brokers)), key=brokers.__getitem__)
    rank = np.empty(len(brokers), np.int64)
    rank[by_name] = np.arange(len(brokers))
    row_rank = rank[np.asarray(codes, np.int64)]
    order = np.lexsort((row_rank, topic_of_row)).astype(np.int64)  # stable: ties keep the index's order
    columns = np.stack([np.asarray(ints[f], np.int64) for f in fields], axis=1)
    return _Queues(topic.take(pa.array(starts[:-1])), starts, row_rank[order], columns[order], order,
                   [brokers[i] for i in by_name], (topic, brokers, codes, ints))


def _queue_digest(queues: _Queues) -> bytes:
    """What the topic index and bodies were built from, as far as topic_queue goes: equal digests
    mean the same rows in the same order."""
    h = hashlib.blake2b(digest_size=DIGEST_BYTES)
    offsets, data = _string_parts(queues.names)
    for part in (offsets, data, queues.starts, queues.broker_rank, queues.ints):
        h.update(np.ascontiguousarray(part).tobytes())
        h.update(b"|")
    h.update(json.dumps(queues.brokers).encode())
    return h.digest()


def _order_conf(snap: Snapshot) -> dict[str, str]:
    return snap.kv.get(ev.ORDER_TOPIC_CONFIG, {}) if snap.switches["orderMessageEnable"] else {}


def _deps_digest(snap: Snapshot) -> bytes:
    """Everything but topic_queue that a route body reads."""
    deps = [snap.switches["supportActingMaster"], _order_conf(snap), snap.brokers,
            sorted([c, a, s] for (c, a), s in snap.filters.items())]
    return hashlib.blake2b(json_codec.dumps_sorted(deps).encode(), digest_size=DIGEST_BYTES).digest()


def encoder_digest() -> bytes:
    """The code that decides what a body is: a previous file's bodies are reused only when it
    is the same (reading five source files costs microseconds)."""
    h = hashlib.blake2b(digest_size=DIGEST_BYTES)
    modules: tuple[ModuleType, ...] = (route_reads, json_codec, topic_index_module, snapshot_module,
                                       sys.modules[__name__])
    for module in modules:
        h.update(Path(str(module.__file__)).read_bytes())
    return h.digest()


# ---------------------------------------------------------------- kinds of topics


@dataclasses.dataclass(frozen=True)
class _Kinds:
    of_topic: I64              # per topic: its kind, kinds numbered by their first topic
    first_topic: I64           # per kind: its first topic


def factorize(values: npt.NDArray[Any]) -> tuple[I64, int]:
    """Dense ids of `values`, numbered by first appearance, and how many: Arrow's hash table
    (numpy's `unique` sorts, and over rows of several columns it was seconds at a million)."""
    encoded = pc.dictionary_encode(pa.array(values))
    return np.asarray(encoded.indices.to_numpy(zero_copy_only=False), np.int64), len(encoded.dictionary)


def dense_ids(columns: list[npt.NDArray[Any]]) -> tuple[I64, int]:
    """Ids of the rows of `columns` (equal rows, equal ids; numbered by first appearance): the
    columns' ids combined in one integer, compacted again whenever it could overflow."""
    key = np.zeros(len(columns[0]) if columns else 0, np.int64)
    span = 1
    for column in columns:
        ids, count = factorize(column)
        if span * count >= 1 << 62:
            key, span = factorize(key)
        key = key * count + ids
        span *= max(count, 1)
    return factorize(key)


def _row_ids(matrix: I64) -> I64:
    """Ids of the rows of a 2-D integer matrix (equal rows, equal ids), each row one fixed-size
    binary value to Arrow's hash table: the system topics of a 100,000-broker fleet are 13 rows of
    100,000 numbers, and one column per number was 100,000 hash tables for each cut."""
    m = np.ascontiguousarray(matrix, dtype="<i8")
    if m.shape[1] == 0:
        return np.zeros(m.shape[0], np.int64)
    values = pa.FixedSizeBinaryArray.from_buffers(pa.binary(8 * m.shape[1]), m.shape[0], [None, pa.py_buffer(m)])
    encoded = pc.dictionary_encode(values)
    return np.asarray(encoded.indices.to_numpy(zero_copy_only=False), np.int64)


def _kinds(snap: Snapshot, q: _Queues) -> _Kinds:
    """Topics whose bodies are built from the same inputs: the same queue rows (brokerName and
    the four numbers, in order), the same sync-member treatment (the acting-master rewrite is not
    applied to them) and the same order-topic config. Grouped in Arrow and numpy, by row count;
    kinds are numbered by their first topic in name order."""
    topics = len(q.names)
    if topics == 0:
        return _Kinds(np.zeros(0, np.int64), np.zeros(0, np.int64))
    row_kind, _ = dense_ids([q.broker_rank, *q.ints.T])
    sync = np.zeros(topics, np.int64)
    if snap.switches["supportActingMaster"]:
        starts_sync = pc.starts_with(q.names, route_reads.SYNC_BROKER_MEMBER_PREFIX)
        sync = np.asarray(starts_sync.to_numpy(zero_copy_only=False), np.int64)
    conf = _order_conf(snap)
    order_id = np.zeros(topics, np.int64)
    if conf:
        keys = sorted(conf)
        value_ids = {v: i + 1 for i, v in enumerate(sorted(set(conf.values())))}
        key_value = np.array([value_ids[conf[k]] for k in keys], np.int64)
        found = pc.index_in(q.names, value_set=pa.array(keys, pa.string()))
        at = np.asarray(found.fill_null(-1).to_numpy(zero_copy_only=False), np.int64)
        order_id = np.where(at >= 0, key_value[np.maximum(at, 0)], 0)
    counts = np.diff(q.starts)
    local = np.empty(topics, np.int64)  # a kind's id among the topics of its row count
    for count in np.unique(counts).tolist():
        chosen = np.flatnonzero(counts == count)
        rows = q.starts[chosen][:, None] + np.arange(count)
        local[chosen], _ = dense_ids([sync[chosen], order_id[chosen], _row_ids(row_kind[rows])])
    kind, kinds = dense_ids([counts, local])
    first = np.full(kinds, topics, np.int64)
    np.minimum.at(first, kind, np.arange(topics, dtype=np.int64))
    return _Kinds(kind, first)


def _group_digests(snap: Snapshot, q: _Queues) -> npt.NDArray[np.uint8]:
    """Per group of topic_queue (`q.brokers`' order), a BLAKE2b-128 of everything a route reads of
    it: its name, its BrokerData (or its absence) and the filter servers of its addresses."""
    parts = []
    for name in q.brokers:
        bd = snap.brokers.get(name)
        filters = None if bd is None else [[bd["cluster"], addr, snap.filters.get((bd["cluster"], addr))]
                                           for addr in bd["brokerAddrs"].values()]
        # orjson's sorted text where it is the standard library's (json_codec.dumps_sorted)
        parts.append(hashlib.blake2b(json_codec.dumps_sorted([name, bd, filters]).encode(),
                                     digest_size=DIGEST_BYTES).digest())
    return np.frombuffer(b"".join(parts), np.uint8).reshape(len(parts), DIGEST_BYTES)


KEY_CHUNK_ROWS = 1 << 16  # the rows whose key records are built at a time (`_kind_keys`): 48 bytes each


def _kind_keys(snap: Snapshot, q: _Queues, kinds: _Kinds, names: list[str]) -> list[bytes]:
    """Each kind's key: everything `route_reads.topic_route` reads for its first topic, hashed (its
    queue rows in order, each as its group's digest and its four numbers; the acting-master switch
    as it applies to the name; its order-topic config). Equal keys, equal bodies: an incremental
    write reuses the previous file's body of a key it has. The rows' records are built in numpy,
    a chunk at a time, and a kind costs one slice and one hash: at 100,000 brokers a cut keys
    300,000 kinds, and a Python list and JSON text per kind were 21 s of a wave's cut."""
    digests = _group_digests(snap, q)
    acting_on = snap.switches["supportActingMaster"]
    order = _order_conf(snap)
    prefixes: dict[tuple[bool, str | None], bytes] = {}
    keys: list[bytes] = []
    lo = hi = 0
    records = np.zeros((0, DIGEST_BYTES + 8 * q.ints.shape[1]), np.uint8)
    for topic, name in zip(kinds.first_topic.tolist(), names, strict=True):
        a, b = int(q.starts[topic]), int(q.starts[topic + 1])
        if b > hi:  # kinds come in first-topic order: their rows only move forward
            lo, hi = a, min(max(b, a + KEY_CHUNK_ROWS), len(q.broker_rank))
            ranks, ints = q.broker_rank[lo:hi], np.ascontiguousarray(q.ints[lo:hi], dtype="<i8")
            records = np.concatenate([digests[ranks], ints.view(np.uint8).reshape(len(ranks), -1)], axis=1)
        at = (acting_on and not name.startswith(route_reads.SYNC_BROKER_MEMBER_PREFIX), order.get(name))
        prefix = prefixes.get(at)
        if prefix is None:
            prefix = prefixes[at] = json_codec.dumps_sorted(list(at)).encode() + b"\n"
        h = hashlib.blake2b(prefix, digest_size=DIGEST_BYTES)
        h.update(records[a - lo:b - lo].tobytes())
        keys.append(h.digest())
    return keys


def _index_of(q: _Queues, topics: list[int]) -> TopicIndex:
    """A TopicIndex of only `topics`, its rows in the full index's order: `route_reads` builds
    their bodies exactly as it would over the whole cut."""
    topic, brokers, codes, ints = q.source
    spans = [q.rows[int(q.starts[i]):int(q.starts[i + 1])] for i in topics]
    rows = np.sort(np.concatenate(spans)) if spans else np.zeros(0, np.int64)
    take = pa.array(rows, pa.int64())
    columns: dict[str, Any] = {"topic": topic.take(take),
                               "brokerName": pa.array([brokers[c] for c in np.asarray(codes)[rows].tolist()], pa.string())}
    for f in topic_index_module.QUEUE_FIELDS[1:]:
        columns[f] = pa.array(np.asarray(ints[f])[rows], pa.int32())
    return TopicIndex(pa.table(columns))


# ---------------------------------------------------------------- the rest of the cut


def rest_of(snap: Snapshot) -> dict[str, Any]:
    """The cut but its topic_queue, as rows `build_snapshot` turns back into the same Snapshot."""
    tables = stable_tables(snap)
    tables[t.BROKER_LIVE.name] = snap.live
    return {"snapshot": snapshot_row(snap), "tables": tables}


def snapshot_row(snap: Snapshot) -> dict[str, Any] | None:
    """The cut's `snapshots` row as a Snapshot keeps it (None: the empty cut has none)."""
    if snap.snapshot_id is None:
        return None
    return {"snapshotId": snap.snapshot_id, "commitTime": snap.commit_time,
            **{f"{name}_version": v for name, v in sorted(snap.versions.items())},
            "sourceOffsets": json.dumps(snap.source_offsets, sort_keys=True)}


def stable_tables(snap: Snapshot) -> dict[str, Any]:
    """The rows of the tables but topic_queue and broker_live: what a heartbeat does not move."""
    broker_addr = [{"brokerName": name, "cluster": bd["cluster"], "brokerId": int(bid), "brokerAddr": addr,
                    "zoneName": bd.get("zoneName"), "enableActingMaster": bd["enableActingMaster"]}
                   for name, bd in snap.brokers.items() for bid, addr in bd["brokerAddrs"].items()]
    kv: list[dict[str, str | None]] = [
        {"namespace": ns, "key": k, "value": v} for ns, table in snap.kv.items() for k, v in table.items()]
    kv += [{"namespace": ns, "key": None, "value": None} for ns, table in snap.kv.items() if not table]
    return {
        t.BROKER_ADDR.name: broker_addr,
        t.CLUSTER_ADDR.name: [{"clusterName": c, "brokerName": b} for c, names in snap.clusters.items() for b in names],
        t.FILTER_SERVER.name: [{"clusterName": c, "brokerAddr": a, "filterServer": s}
                               for (c, a), s in sorted(snap.filters.items())],
        t.KV_CONFIG.name: kv,
        t.NAMESRV_CONFIG.name: [{"scope": "namesrv", "key": k, "value": "true" if v else "false"}
                                for k, v in sorted(snap.switches.items())],
    }


def _stable_inputs(snap: Snapshot) -> tuple[Any, ...]:
    """What `tables`, the cluster info and the deps digest are functions of, but topic_queue."""
    return snap.brokers, snap.clusters, snap.filters, snap.kv, snap.switches


def _head_sections(snap: Snapshot, index: Mapping[str, Section],
                   stable_from: CutFile | None) -> tuple[dict[str, Section], bytes]:
    """The head's sections and its tables digest; `stable_from`: a file whose `tables` and cluster
    info are this cut's (the caller knows its inputs were the same), copied rather than encoded."""
    # json_codec's sorted UTF-8 (orjson where it writes the standard library's bytes): at 100,000
    # brokers the head's broker_live and tables are 40 MB of JSON each cut
    live = json_codec.dumps_sorted_utf8({"snapshot": snapshot_row(snap), t.BROKER_LIVE.name: snap.live})
    if stable_from is not None:
        return {"cluster_info": stable_from.section("cluster_info"), "tables": stable_from.section("tables"),
                "live": live}, stable_from.tables_digest
    tables = json_codec.dumps_sorted_utf8({"tables": stable_tables(snap), ORPHANS: _orphans(snap, index)})
    digest = hashlib.blake2b(tables, digest_size=DIGEST_BYTES).digest()
    return {"cluster_info": route_reads.cluster_info_body(snap), "tables": tables, "live": live}, digest


def _orphans(snap: Snapshot, sections: Mapping[str, Section]) -> dict[str, list[dict[str, Any]]]:
    """The QueueDatas of the topics without a route body (queue rows, but no BrokerData for any
    of them): the one thing about a topic its body cannot tell a reader (`snapshots.mapped`)."""
    body_of = np.frombuffer(sections["body_of"], "<u4")
    missing = np.flatnonzero(body_of == NO_BODY)
    if not len(missing):
        return {}
    name_off = np.frombuffer(sections["name_off"], "<u4")
    names = bytes(sections["names"])
    found = (names[name_off[e]:name_off[e + 1]].decode() for e in missing.tolist())
    return {name: [dict(q) for q in snap.topics[name]] for name in found}


# ---------------------------------------------------------------- the writer


@dataclasses.dataclass(frozen=True)
class CutFileStats:
    """What a write did: the head's and the index part's sizes, whether the part was written, the
    counts, how much it reused of the previous file (`reused`: "index" = level 1, the index part
    as it was; "parts" = hashes or bodies; "none"), and why a previous file was not used
    (`previous_refused`)."""

    path: Path
    file_bytes: int            # the head's
    index_path: Path
    index_bytes: int
    index_written: bool        # False: the directory held the index part already (the previous cut's)
    tables_reused: bool        # the head's tables and cluster info copied from the previous file
    topics: int
    bodies: int
    kinds: int
    groups: int
    encoded: int               # bodies encoded by route_reads in this write
    reused_bodies: int         # kinds whose body came from the previous file
    reused_hashes: int         # names whose hash came from the previous file
    reused: str
    previous_refused: str | None
    seconds: float
    cpu_seconds: float
    section_bytes: dict[str, int]


def _bytes_of(array: npt.NDArray[Any], dtype: str) -> bytes:
    return np.ascontiguousarray(array, dtype=dtype).tobytes()


def _offsets(lengths: list[int] | I64, dtype: str) -> bytes:
    off = np.zeros(len(lengths) + 1, np.int64)
    off[1:] = np.cumsum(np.asarray(lengths, np.int64))
    return _bytes_of(off, dtype)


def _previous_names(prev: CutFile) -> Any:
    """The previous file's names as an Arrow array over its mapping (no copy)."""
    offsets = pa.py_buffer(prev.section("name_off"))
    return pa.Array.from_buffers(pa.string(), prev.topic_count, [None, offsets, pa.py_buffer(prev.section("names"))])


def _hashes(q: _Queues, prev: CutFile | None) -> tuple[U64, int, bool]:
    """Every name's hash, those the previous file has taken from it; and whether the names are
    the previous file's, in its order (its slots then fit as they are)."""
    if prev is None or prev.topic_count == 0 or len(q.names) == 0:
        return hash_names(q.names), 0, prev is not None and prev.topic_count == len(q.names) == 0
    offsets, data = _string_parts(q.names)
    if (prev.topic_count == len(q.names) and np.array_equal(np.frombuffer(prev.section("names"), np.uint8), data)
            and np.array_equal(np.frombuffer(prev.section("name_off"), "<u4"), offsets)):
        return np.frombuffer(prev.section("hashes"), "<u8").astype(np.uint64), len(q.names), True
    old_names = _previous_names(prev)
    at = np.asarray(pc.index_in(q.names, value_set=old_names).fill_null(-1).to_numpy(zero_copy_only=False), np.int64)
    del old_names
    found = at >= 0
    old_hashes = np.frombuffer(prev.section("hashes"), np.uint64)
    hashes = np.empty(len(at), np.uint64)
    hashes[found] = old_hashes[at[found]]
    missing = np.flatnonzero(~found)
    if len(missing):
        hashes[missing] = hash_names(q.names.take(pa.array(missing)))
    same = len(missing) == 0 and len(at) == prev.topic_count and bool(np.all(at == np.arange(len(at))))
    return hashes, int(found.sum()), same


def _groups(q: _Queues) -> dict[str, bytes]:
    """Each group's topics: the (group, topic) pairs of the rows, sorted and deduplicated."""
    width = max(1, len(q.names))
    pairs = np.sort(q.broker_rank * width + np.repeat(np.arange(len(q.names), dtype=np.int64), np.diff(q.starts)))
    if len(pairs):
        pairs = pairs[np.append(True, pairs[1:] != pairs[:-1])]
    rank, topic = pairs // width, pairs % width
    present = rank[np.append(True, rank[1:] != rank[:-1])] if len(rank) else rank
    names = [q.brokers[int(r)].encode() for r in present.tolist()]
    starts = np.searchsorted(rank, present, side="left")
    group_off = np.append(starts, len(pairs)) if len(present) else np.zeros(1, np.int64)
    return {"group_name_off": _offsets([len(n) for n in names], "<u4"), "group_names": b"".join(names),
            "group_off": _bytes_of(group_off, "<u4"), "group_topics": _bytes_of(topic, "<u4")}


def _encode_index(snap: Snapshot, q: _Queues, prev: CutFile | None) -> tuple[dict[str, Section], dict[str, int]]:
    """The topic index, the bodies, the kind keys and the group sections of a cut."""
    topics = len(q.names)
    hashes, reused_hashes, same_names = _hashes(q, prev)
    capacity = slot_capacity(topics)
    slots: Section
    if same_names and prev is not None and prev.capacity == capacity:
        slots = prev.section("slots")
    else:
        slots = build_slots(hashes, capacity).astype("<u4").tobytes()
    kinds = _kinds(snap, q)
    old_bodies = {} if prev is None else prev.kind_bodies()
    names = q.names.take(pa.array(kinds.first_topic)).to_pylist() if len(kinds.first_topic) else []
    keys = _kind_keys(snap, q, kinds, names)
    fresh = [k for k, key in enumerate(keys) if key not in old_bodies]
    made: dict[int, bytes | None] = {}
    if fresh:
        few = snap.with_topics(_index_of(q, [int(kinds.first_topic[k]) for k in fresh]))
        made = {k: route_reads.route_body(few, names[k]) for k in fresh}
    number: dict[bytes, int] = {}
    bodies: list[Section] = []
    kind_body = np.empty(len(keys), np.uint32)
    for k, key in enumerate(keys):
        body = made[k] if k in made else old_bodies[key]
        if body is None:
            kind_body[k] = NO_BODY
            continue
        content = bytes(body)
        b = number.get(content)
        if b is None:
            b = number[content] = len(bodies)
            bodies.append(body)
        kind_body[k] = b
    offsets, data = _string_parts(q.names)
    groups = _groups(q)
    sections: dict[str, Section] = {
        "hashes": hashes.astype("<u8").tobytes(),
        "body_of": kind_body[kinds.of_topic].astype("<u4").tobytes() if topics else b"",
        "name_off": _bytes_of(offsets, "<u4"), "names": data.tobytes(), "slots": slots,
        "body_off": _offsets([len(b) for b in bodies], "<u8"), "bodies": b"".join(bodies),
        "kind_keys": b"".join(keys), "kind_body": kind_body.astype("<u4").tobytes(), **groups}
    counts = {"topics": topics, "bodies": len(bodies), "capacity": capacity, "kinds": len(keys),
              "groups": len(groups["group_off"]) // 4 - 1, "encoded": len(fresh), "reused_bodies": len(keys) - len(fresh),
              "reused_hashes": reused_hashes}
    return sections, counts


def _open_previous(previous: CutFile | Path | None, encoder: bytes) -> tuple[CutFile | None, bool, str | None]:
    """The previous file if its work may be reused (and whether this call opened it)."""
    if previous is None:
        return None, False, None
    opened = not isinstance(previous, CutFile)
    try:
        prev = CutFile.open(previous) if isinstance(previous, Path) else previous
    except (OSError, CutFileError) as e:
        return None, False, str(e)
    if prev.encoder != encoder:
        if opened:
            prev.close()
        return None, False, f"{prev.path}: encoded by other code"
    return prev, opened, None


def write_cut(snap: Snapshot, path: Path, previous: CutFile | Path | None = None) -> CutFileStats:
    """Write the cut's head to `path`, replaced atomically, and its index part beside it when the
    directory does not hold it already (the module's docstring: written and fsynced under a
    temporary name, renamed, the directory fsynced; the part before the head). A reader that
    mapped the head `path` named before keeps its cut whole; the next open sees the new one.

    `previous`: the head of an earlier cut (a path, or one already open), whose work is reused as
    the module's docstring says; one that cannot be opened or was encoded by other code is not
    used (`previous_refused` says why), never trusted in part. A path is opened verified (both
    parts' CRC-32 checked: their bytes may be copied into the new files); a CutFile passed open
    is trusted as its caller opened it; when it says which cut it was written from
    (`CutFile.written_from`), what this cut has the same as that one is not hashed or encoded
    again. Old index parts are left where they are: removing them is the directory's owner's call
    (`prune_index_parts`)."""
    started, cpu = time.perf_counter(), time.process_time()
    encoder = encoder_digest()
    prev, opened, refused = _open_previous(previous, encoder)
    try:
        # The cut the previous file was written from, when its writer said (a builder's store hands
        # a cut whose topic_queue did not change the same TopicIndex, an immutable object): the
        # digests of what is the same are taken from that file, not computed again.
        source = None if prev is None else prev.written_from
        same_topics = prev is not None and source is not None and source.topics is snap.topics
        same_stable = same_topics and source is not None and _stable_inputs(source) == _stable_inputs(snap)
        q: _Queues | None = None
        if prev is not None and same_topics:
            queue_digest = prev.queue_digest
        else:
            q = _queues(snap.topics)
            queue_digest = _queue_digest(q)
        deps_digest = prev.deps_digest if prev is not None and same_stable else _deps_digest(snap)
        index_path = path.parent / index_name(queue_digest, deps_digest, encoder)
        if prev is not None and prev.queue_digest == queue_digest and prev.deps_digest == deps_digest:
            sections: dict[str, Section] = {name: prev.section(name) for name in INDEX_SECTIONS}
            counts = {"topics": prev.topic_count, "bodies": prev.body_count, "capacity": prev.capacity,
                      "kinds": prev.kind_count, "groups": prev.group_count, "encoded": 0,
                      "reused_bodies": prev.kind_count, "reused_hashes": prev.topic_count}
            reused = "index"
        else:
            sections, counts = _encode_index(snap, _queues_of(snap, q), prev)
            reused = "parts" if counts["reused_bodies"] or counts["reused_hashes"] else "none"
        digests = (queue_digest, deps_digest, encoder)
        if reused == "index" and prev is not None and prev.index_file_is(index_path):
            index_size, index_crc, index_written = prev.index_size, prev.index_crc, False
        else:
            index_size, index_crc = _write_index(index_path, counts, digests, sections)
            index_written = True
        head, tables_digest = _head_sections(snap, sections, prev if same_stable else None)
        ids = (NO_ID if snap.snapshot_id is None else snap.snapshot_id, NO_ID if snap.commit_time is None else snap.commit_time)
        size, _ = _write_part(path, HEADER, HEAD_SECTIONS, head, lambda layout, size: (
            MAGIC, FORMAT_VERSION, HEADER.size, size, *ids, *digests, tables_digest, index_size, index_crc, 0, *layout))
        section_bytes = {name: len(sections[name]) for name in INDEX_SECTIONS} | {k: len(v) for k, v in head.items()}
    finally:
        if opened and prev is not None:
            prev.close()
    return CutFileStats(
        path=path, file_bytes=size, index_path=index_path, index_bytes=index_size, index_written=index_written,
        tables_reused=same_stable, topics=counts["topics"], bodies=counts["bodies"], kinds=counts["kinds"],
        groups=counts["groups"], encoded=counts["encoded"], reused_bodies=counts["reused_bodies"],
        reused_hashes=counts["reused_hashes"], reused=reused, previous_refused=refused,
        seconds=time.perf_counter() - started, cpu_seconds=time.process_time() - cpu,
        section_bytes=section_bytes)


def _queues_of(snap: Snapshot, q: _Queues | None) -> _Queues:
    return _queues(snap.topics) if q is None else q


def _write_index(path: Path, counts: Mapping[str, int], digests: tuple[bytes, bytes, bytes],
                 sections: Mapping[str, Section]) -> tuple[int, int]:
    group_topics = len(sections["group_topics"]) // 4
    return _write_part(path, INDEX_HEADER, INDEX_SECTIONS, sections, lambda layout, size: (
        INDEX_MAGIC, FORMAT_VERSION, INDEX_HEADER.size, size, counts["topics"], counts["bodies"], counts["capacity"],
        counts["kinds"], counts["groups"], group_topics, *digests, *layout))


def _layout(header_size: int, names: tuple[str, ...], sections: Mapping[str, Section]) -> tuple[list[int], int]:
    layout: list[int] = []
    at = header_size
    for name in names:
        at = (at + 7) & ~7
        layout += [at, len(sections[name])]
        at += len(sections[name])
    return layout, at


def _write_part(path: Path, header: struct.Struct, names: tuple[str, ...], sections: Mapping[str, Section],
                fields: Callable[[list[int], int], tuple[Any, ...]]) -> tuple[int, int]:
    """Write one part (a header whose `fields(layout, size)` precede its reserved word and CRC,
    then `sections` in the order of `names`) under a temporary name, fsync it, rename it to `path`
    and fsync the directory. Its size and CRC-32."""
    layout, size = _layout(header.size, names, sections)
    head = header.pack(*fields(layout, size), 0, 0)
    pieces: list[Section] = []
    at = header.size
    for name, offset in zip(names, layout[::2], strict=True):
        pieces.append(b"\0" * (offset - at))
        pieces.append(sections[name])
        at = offset + len(sections[name])
    crc_at = header.size - 4  # the crc32 field is the header's last four bytes
    crc = zlib.crc32(head[:crc_at])
    for piece in pieces:
        crc = zlib.crc32(piece, crc)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as f:
            f.write(head[:crc_at] + struct.pack("<I", crc))
            for piece in pieces:
                f.write(piece)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return size, crc


# ---------------------------------------------------------------- old index parts


def index_part_named_by(head: Path) -> str | None:
    """The name of the index part the head at `head` names (its header only, unverified: what a
    builder keeps when it prunes), or None when there is no readable head."""
    try:
        with head.open("rb") as f:
            data = f.read(HEADER.size)
    except OSError:
        return None
    if len(data) < HEADER.size:
        return None
    fields = HEADER.unpack_from(data)
    if fields[0] != MAGIC or fields[1] != FORMAT_VERSION:
        return None
    return index_name(*fields[6:9])


def prune_index_parts(directory: Path, keep: Collection[str]) -> list[str]:
    """Remove the index parts in `directory` but those named in `keep`, and the temporary files of
    index parts whose writer died (another pid's); the names removed. For the directory's one
    writer (the host's builder, holding its lock), after it wrote a head: the module's docstring
    says what it keeps and why removing a part a reader maps is harmless."""
    removed: list[str] = []
    mine = f".{os.getpid()}.tmp"
    for found in directory.glob(f"*{INDEX_PREFIX}*{INDEX_SUFFIX}*"):
        name = found.name
        if name.startswith(INDEX_PREFIX) and name.endswith(INDEX_SUFFIX):
            if name in keep:
                continue
        elif not (name.startswith(f".{INDEX_PREFIX}") and name.endswith(".tmp")) or name.endswith(mine):
            continue
        try:
            found.unlink()
        except FileNotFoundError:
            continue
        removed.append(name)
    return removed


# ---------------------------------------------------------------- the reader


def _index_lengths(h: Mapping[str, int]) -> dict[str, int | None]:
    """Each index section's length as the header's counts fix it (None: any length)."""
    return {"hashes": 8 * h["topics"], "body_of": 4 * h["topics"], "name_off": 4 * (h["topics"] + 1), "names": None,
            "slots": 4 * h["capacity"], "body_off": 8 * (h["bodies"] + 1), "bodies": None,
            "kind_keys": DIGEST_BYTES * h["kinds"], "kind_body": 4 * h["kinds"], "group_name_off": 4 * (h["groups"] + 1),
            "group_names": None, "group_off": 4 * (h["groups"] + 1), "group_topics": 4 * h["group_topics"]}


def _map_file(path: Path) -> tuple[mmap.mmap, os.stat_result]:
    """`path` mapped read-only, and what it was when mapped (its inode: a writer's reuse check)."""
    if sys.byteorder != "little":
        raise CutFileError(f"{path}: this reader casts the file's little-endian integers natively")
    with path.open("rb") as f:
        st = os.fstat(f.fileno())
        try:
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), st
        except ValueError as e:  # an empty file cannot be mapped
            raise CutFileError(f"{path}: truncated: {e}") from e


def _close_map(mm: mmap.mmap) -> None:
    try:
        mm.close()
    except BufferError:
        pass  # an answer (or a failed check's traceback) still holds a view: unmapped with the last


def _part_fields(path: Path, view: memoryview, header: struct.Struct, magic: bytes) -> tuple[Any, ...]:
    """A part's header fields, once its magic, version, header size and length are as they must be."""
    if len(view) < header.size:
        raise CutFileError(f"{path}: truncated: {len(view)} bytes, a header needs {header.size}")
    fields = header.unpack_from(view)
    found, version, header_size, file_size = fields[:4]
    if found != magic:
        what = "a cut file's head" if magic == MAGIC else "a cut file's index part"
        raise CutFileError(f"{path}: not {what} (magic {found!r}, expected {magic!r})")
    if version != FORMAT_VERSION or header_size != header.size:
        raise CutFileError(f"{path}: format version {version} (header {header_size} bytes); this reader reads "
                           f"version {FORMAT_VERSION} ({header.size} bytes)")
    if file_size != len(view):
        raise CutFileError(f"{path}: truncated or extended: the header says {file_size} bytes, the file has "
                           f"{len(view)}")
    return fields


def _slice_sections(path: Path, view: memoryview, header_size: int, names: tuple[str, ...], layout: tuple[int, ...],
                    expected: Mapping[str, int | None]) -> dict[str, memoryview]:
    sections: dict[str, memoryview] = {}
    for name, offset, length in zip(names, layout[::2], layout[1::2], strict=True):
        if offset < header_size or offset % 8 or offset + length > len(view):
            raise CutFileError(f"{path}: truncated or corrupted: section {name} at {offset}, {length} bytes, "
                               f"in a file of {len(view)}")
        want = expected.get(name)
        if want is not None and length != want:
            raise CutFileError(f"{path}: corrupted: section {name} has {length} bytes, the header's counts "
                               f"make it {want}")
        sections[name] = view[offset:offset + length]
    return sections


def _check_crc(path: Path, view: memoryview, header_size: int, crc: int) -> None:
    found = zlib.crc32(view[header_size:], zlib.crc32(view[:header_size - 4]))
    if found != crc:
        raise CutFileError(f"{path}: corrupted: CRC-32 {found:#010x}, the header says {crc:#010x}")


class IndexPart:
    """An index part, mapped read-only and checked, shared by the CutFiles of every head that names
    it (a serving store's successive cuts while the routes do not change). Each CutFile takes its
    own views of the sections and holds a use; the mapping is dropped with the last use (`release`),
    or with the last answer still sliced from it."""

    def __init__(self, path: Path, mm: mmap.mmap, st: os.stat_result, *, verify: bool) -> None:
        self.path, self.name, self.verified = path, path.name, verify
        self.file_id = (st.st_dev, st.st_ino, st.st_size)  # the file mapped, for a writer's reuse check
        self._mm: mmap.mmap | None = mm
        self._users = 1
        self._lock = threading.Lock()
        self._view = view = memoryview(mm)
        fields = _part_fields(path, view, INDEX_HEADER, INDEX_MAGIC)
        names = ("topics", "bodies", "capacity", "kinds", "groups", "group_topics")
        self.counts: dict[str, int] = dict(zip(names, fields[4:10], strict=True))
        self.digests: tuple[bytes, bytes, bytes] = fields[10:13]
        self.size, self.crc = len(view), fields[-1]
        layout = fields[13:13 + 2 * len(INDEX_SECTIONS)]
        self.sections = _slice_sections(path, view, INDEX_HEADER.size, INDEX_SECTIONS, layout, _index_lengths(self.counts))
        capacity, topics = self.counts["capacity"], self.counts["topics"]
        if capacity < 2 or capacity & (capacity - 1) or capacity < 2 * topics:
            raise CutFileError(f"{path}: corrupted: {capacity} slots for {topics} topics")
        if verify:
            _check_crc(path, view, INDEX_HEADER.size, self.crc)
        self._check_ends()

    def _check_ends(self) -> None:
        """The offset arrays start at 0 and end at their data's length (cheap, and what a
        truncation or a wrong count would break first)."""
        s = self.sections
        for off, length, data_name in ((s["name_off"].cast("I"), len(s["names"]), "names"),
                                       (s["body_off"].cast("Q"), len(s["bodies"]), "bodies"),
                                       (s["group_name_off"].cast("I"), len(s["group_names"]), "group_names"),
                                       (s["group_off"].cast("I"), len(s["group_topics"]) // 4, "group_topics")):
            first, last = off[0], off[len(off) - 1]
            off.release()
            if first != 0 or last != length:
                raise CutFileError(f"{self.path}: corrupted: the offsets of {data_name} end at {last}, it has {length}")

    @classmethod
    def open(cls, path: Path, *, verify: bool) -> IndexPart:
        mm, st = _map_file(path)
        try:
            return cls(path, mm, st, verify=verify)
        except BaseException:
            _close_map(mm)
            raise

    def acquire(self) -> bool:
        """One more use of this mapping; False when it has been dropped already."""
        with self._lock:
            if self._mm is None:
                return False
            self._users += 1
            return True

    def release(self) -> None:
        """One use less; the last drops the mapping."""
        with self._lock:
            self._users -= 1
            if self._users > 0 or self._mm is None:
                return
            mm, self._mm = self._mm, None
        for view in self.sections.values():
            view.release()
        self._view.release()
        _close_map(mm)


class CutFile:
    """A cut's head and its index part, mapped read-only: answers are `memoryview` slices of the
    mappings, valid for as long as they are held (files renamed over these or removed change
    nothing here). `index_reused`: whether this open shared the `reuse` CutFile's index part
    rather than map and check it again.

    `close()` drops the head's mapping and this file's use of the index part; a mapping still
    referenced by an answer handed out (a body being sent) is unmapped when the last such answer
    is dropped. A closed CutFile answers nothing more. Python reads the files' integers with
    `memoryview.cast` (native order), so the reader refuses to run on a big-endian host rather
    than misread them."""

    def __init__(self, path: Path, mm: mmap.mmap, *, verify: bool, reuse: CutFile | None = None) -> None:
        self.path = path
        self._mm: mmap.mmap | None = mm
        self._index: IndexPart | None = None
        # The cut the file was written from, when its writer says so (the builder, of the file it
        # just wrote): a write against this file of a cut holding the very same TopicIndex (an
        # immutable object) takes the queue digest from here rather than hash topic_queue again,
        # and, when the cut's other tables but broker_live are equal too, this head's tables.
        self.written_from: Snapshot | None = None
        view = memoryview(mm)
        fields = _part_fields(path, view, HEADER, MAGIC)
        self.snapshot_id: int | None = None if fields[4] == NO_ID else fields[4]
        self.commit_time: int | None = None if fields[5] == NO_ID else fields[5]
        self.queue_digest, self.deps_digest, self.encoder, self.tables_digest = fields[6:10]
        self.index_size, self.index_crc = fields[10:12]
        head = _slice_sections(path, view, HEADER.size, HEAD_SECTIONS, fields[13:13 + 2 * len(HEAD_SECTIONS)], {})
        if verify:
            _check_crc(path, view, HEADER.size, fields[-1])
        self.index_path = path.parent / index_name(self.queue_digest, self.deps_digest, self.encoder)
        index, self.index_reused = self._index_part(reuse, verify)
        self._index = index
        self._sections = {**{name: v[:] for name, v in index.sections.items()}, **head}
        c = index.counts
        self.topic_count, self.body_count, self.capacity = c["topics"], c["bodies"], c["capacity"]
        self.kind_count, self.group_count = c["kinds"], c["groups"]
        self._hashes = self._sections["hashes"].cast("Q")
        self._body_of = self._sections["body_of"].cast("I")
        self._name_off = self._sections["name_off"].cast("I")
        self._names = self._sections["names"]
        self._slots = self._sections["slots"].cast("I")
        self._mask = self.capacity - 1
        self._body_off = self._sections["body_off"].cast("Q")
        self._bodies = self._sections["bodies"]
        self._group_name_off = self._sections["group_name_off"].cast("I")
        self._group_names = self._sections["group_names"]
        self._group_off = self._sections["group_off"].cast("I")
        self._group_topics = self._sections["group_topics"].cast("I")

    def _index_part(self, reuse: CutFile | None, verify: bool) -> tuple[IndexPart, bool]:
        """The index part the head names: `reuse`'s when it is that one, else mapped and checked."""
        shared = None if reuse is None else reuse._index
        if shared is not None and shared.name == self.index_path.name and (shared.size, shared.crc) == \
                (self.index_size, self.index_crc) and (shared.verified or not verify) and shared.acquire():
            return shared, True
        where = f"{self.path}: its index part {self.index_path.name}"
        try:
            part = IndexPart.open(self.index_path, verify=verify)
        except FileNotFoundError:
            raise IndexPartError(self.index_path, f"{where} is missing (removed after newer cuts, or never "
                                                  "written)") from None
        except (OSError, CutFileError) as e:
            raise IndexPartError(self.index_path, f"{where} cannot be used: {e}") from e
        if (part.digests, part.size, part.crc) != ((self.queue_digest, self.deps_digest, self.encoder),
                                                    self.index_size, self.index_crc):
            part.release()
            raise IndexPartError(self.index_path, f"{where} is not the one the head was written with (the head "
                                                  f"says {self.index_size} bytes, CRC-32 {self.index_crc:#010x}; the "
                                                  f"part has {part.size}, {part.crc:#010x})")
        return part, False

    @classmethod
    def open(cls, path: Path, *, verify: bool = True, reuse: CutFile | None = None) -> CutFile:
        """Map the head at `path` and the index part it names. `verify` checks the CRC-32 of the
        head, and of the index part unless it is `reuse`'s (already checked; a pass over a part
        is tens of milliseconds at 50 MiB); without it only the headers and the section bounds
        are checked, and a flipped byte inside a body would go unseen. `reuse`: the CutFile this
        one follows (a serving store's served cut, a builder's last write), whose mapping of the
        index part is shared when the head names the same one."""
        mm, _ = _map_file(path)
        try:
            return cls(path, mm, verify=verify, reuse=reuse)
        except BaseException:
            _close_map(mm)
            raise

    def shares_index_with(self, other: CutFile) -> bool:
        """Whether both map the index part through one mapping (one was opened reusing the other's)."""
        return self._index is not None and self._index is other._index

    def index_file_is(self, path: Path) -> bool:
        """Whether `path` is the very file this cut's index part maps (same inode and size): a
        writer need not write it again."""
        index = self._index
        if index is None:
            return False
        try:
            st = os.stat(path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino, st.st_size) == index.file_id

    def close(self) -> None:
        """Drop the head's mapping and this file's use of the index part (see the class's docstring)."""
        mm, self._mm = self._mm, None
        if mm is None:
            return
        for name in list(vars(self)):
            value = getattr(self, name)
            if isinstance(value, memoryview):
                value.release()
        for view in self._sections.values():
            view.release()
        _close_map(mm)
        index, self._index = self._index, None
        if index is not None:
            index.release()

    def __enter__(self) -> CutFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def section(self, name: str) -> memoryview:
        """A section's bytes, of either part (for a writer reusing them, and for tools)."""
        return self._sections[name]

    # ---------------------------------------------------------------- answers

    def _entry(self, topic: str) -> int:
        """The topic's entry, or -1: open addressing, the name compared on a hash match."""
        try:
            key = topic.encode()
        except UnicodeEncodeError:
            return -1  # a lone surrogate: no topic of a cut has one
        h = topic_hash(key)
        slots, hashes, name_off, names, mask = self._slots, self._hashes, self._name_off, self._names, self._mask
        s = h & mask
        for _ in range(self.capacity):
            e = slots[s]
            if not e:
                return -1
            e -= 1
            if e >= self.topic_count:
                raise CutFileError(f"{self.path}: corrupted: slot {s} names entry {e} of {self.topic_count}")
            if hashes[e] == h and names[name_off[e]:name_off[e + 1]] == key:
                return int(e)
            s = (s + 1) & mask
        raise CutFileError(f"{self.path}: corrupted: no empty slot in {self.capacity}")

    def body(self, b: int) -> memoryview | None:
        """Body number `b` (None for NO_BODY): what `topic_bodies` numbers."""
        return self._body(b)

    def topic_bodies(self) -> Iterator[tuple[str, int]]:
        """Every topic with its body number (NO_BODY: no route), in name order: a walk over the
        whole cut decodes each distinct body once, not once per topic."""
        for e in range(self.topic_count):
            yield self._name(e), int(self._body_of[e])

    def _body(self, b: int) -> memoryview | None:
        if b == NO_BODY:
            return None
        if b >= self.body_count:
            raise CutFileError(f"{self.path}: corrupted: body {b} of {self.body_count}")
        return self._bodies[self._body_off[b]:self._body_off[b + 1]]

    def route_body(self, topic: str) -> memoryview | None:
        """`route_reads.route_body(snap, topic)` of the file's cut, or None (TOPIC_NOT_EXIST)."""
        e = self._entry(topic)
        return None if e < 0 else self._body(self._body_of[e])

    def __contains__(self, topic: object) -> bool:
        """Whether the cut's topic_queue has the topic (with a route or not: `all_topics` lists both)."""
        return isinstance(topic, str) and self._entry(topic) >= 0

    def cluster_info_body(self) -> memoryview:
        return self._sections["cluster_info"]

    def _name(self, e: int) -> str:
        return str(self._names[self._name_off[e]:self._name_off[e + 1]], "utf-8")

    def topic_names(self) -> Iterator[str]:
        """Every topic of the cut, in name order (as `sorted(snap.topics)`)."""
        for e in range(self.topic_count):
            yield self._name(e)

    def group_names(self) -> Iterator[str]:
        """The broker groups holding a queue row, in name order."""
        off, names = self._group_name_off, self._group_names
        for g in range(self.group_count):
            yield str(names[off[g]:off[g + 1]], "utf-8")

    def topics_of_group(self, broker_name: str) -> list[str]:
        """The topics a group holds a queue row of, in name order (binary search over the groups)."""
        key = broker_name.encode("utf-8", "surrogatepass")
        off, names = self._group_name_off, self._group_names
        lo, hi = 0, self.group_count
        while lo < hi:
            mid = (lo + hi) // 2
            if bytes(names[off[mid]:off[mid + 1]]) < key:
                lo = mid + 1
            else:
                hi = mid
        if lo == self.group_count or names[off[lo]:off[lo + 1]] != key:
            return []
        return [self._name(e) for e in self._group_topics[self._group_off[lo]:self._group_off[lo + 1]]]

    def body_keys(self) -> list[bytes | None]:
        """Per body, the key of a kind it is the body of (None: none names it). A kind key hashes
        everything its body is made of, the BrokerDatas of its queues' groups included
        (`_kind_keys`), so what a reader judges of a body holds for every body of the same key
        (the risk report keeps it across cuts)."""
        keys = self._sections["kind_keys"]
        bodies, first = np.unique(np.frombuffer(self._sections["kind_body"], "<u4"), return_index=True)
        out: list[bytes | None] = [None] * self.body_count
        for b, k in zip(bodies.tolist(), first.tolist(), strict=True):
            if b < self.body_count:
                out[b] = bytes(keys[DIGEST_BYTES * k:DIGEST_BYTES * (k + 1)])
        return out

    def kind_bodies(self) -> dict[bytes, memoryview | None]:
        """Kind key -> its body in this file: what an incremental write reuses."""
        keys = self._sections["kind_keys"]
        kind_body = self._sections["kind_body"].cast("I")
        return {bytes(keys[DIGEST_BYTES * k:DIGEST_BYTES * (k + 1)]): self._body(kind_body[k])
                for k in range(self.kind_count)}

    def _parsed(self, section: str) -> dict[str, Any]:
        try:
            found: dict[str, Any] = json_codec.loads(bytes(self._sections[section]))
        except ValueError as e:
            raise CutFileError(f"{self.path}: corrupted: its {section} section is not JSON ({e})") from e
        return found

    def rest_tables(self) -> dict[str, Any]:
        """`{"tables": {table: rows}, "orphanQueues": ...}`: the head's `tables` section."""
        return self._parsed("tables")

    def rest_live(self) -> dict[str, Any]:
        """`{"snapshot": row, "broker_live": rows}`: the head's `live` section."""
        return self._parsed("live")

    def rest(self) -> dict[str, Any]:
        """The rest of the cut's rows, as `rest_of` makes them, and the orphans' QueueDatas."""
        stable, live = self.rest_tables(), self.rest_live()
        return {"snapshot": live["snapshot"], "tables": {**stable["tables"], t.BROKER_LIVE.name: live[t.BROKER_LIVE.name]},
                ORPHANS: stable[ORPHANS]}

    def rest_snapshot(self) -> Snapshot:
        """The cut as a Snapshot with an empty topic_queue (its topics are this file's)."""
        rest = self.rest()
        return build_snapshot(rest["snapshot"], {t.TOPIC_QUEUE.name: [], **rest["tables"]})
