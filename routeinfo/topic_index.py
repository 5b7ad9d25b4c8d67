"""topic → QueueDatas over a cut's topic_queue table, kept as sorted Arrow columns.

A snapshot with a million queue rows must load in well under a second, so loading only sorts
the table by topic in Arrow (no Python object per row or per topic); a lookup is a binary
search, and a topic's QueueData dicts are built on its first lookup and kept for the life of
the snapshot. The full topic list is materialized only when a listing asks for it. Behaves as
a read-only Mapping for the route_reads.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from routeinfo.state import topic_keys_digest

QUEUE_FIELDS = ("brokerName", "perm", "readQueueNums", "topicSysFlag", "writeQueueNums")


# Values converted to Python per Arrow call (here and by `snapshots.reader`): each call holds the
# GIL throughout, and a serving process answers on another thread meanwhile (a 100,000-broker
# cut's columns whole: tens to hundreds of milliseconds); between two calls the GIL may pass.
CHUNK_ROWS = 4096


def _py_list(array: pa.Array) -> list[Any]:
    return [v for i in range(0, len(array), CHUNK_ROWS) for v in array.slice(i, CHUNK_ROWS).to_pylist()]


@dataclass(frozen=True)
class QueueColumns:
    """A TopicIndex's rows as columns, sorted by topic, read-only: what a reader that works over
    the whole table at once (the cut file's writer, the risk report) needs without a Python row
    per queue. `broker_codes` index `brokers`; `ints` holds perm, readQueueNums, topicSysFlag and
    writeQueueNums."""

    topic: pa.Array
    brokers: list[str]
    broker_codes: Any
    ints: Mapping[str, Any]


class TopicIndex(Mapping):
    def __init__(self, table: pa.Table) -> None:
        self._n = table.num_rows
        if self._n:
            table = pc.take(table.select(("topic",) + QUEUE_FIELDS), pc.sort_indices(table, [("topic", "ascending")]))
        else:
            table = pa.table({"topic": pa.array([], pa.string()), "brokerName": pa.array([], pa.string()),
                              **{f: pa.array([], pa.int32()) for f in QUEUE_FIELDS[1:]}})
        self._topic = table.column("topic").combine_chunks()
        broker = pc.dictionary_encode(table.column("brokerName").combine_chunks())
        self._brokers: list[str] = _py_list(broker.dictionary)
        self._broker_codes = broker.indices.to_numpy(zero_copy_only=False)
        self._int_columns = {f: table.column(f).to_numpy() for f in QUEUE_FIELDS[1:]}
        self._cache: dict[str, list[dict[str, Any]]] = {}
        self._names: list[str] | None = None
        self._group_keys: dict[str, str] = {}  # brokerName -> topic_keys_digest, filled per ask
        self._by_group: tuple[Any, Any, dict[str, int]] | None = None  # row order by group, its codes, code per name

    def columns(self) -> QueueColumns:
        """The index's own columns (not copies): callers must not write to them."""
        return QueueColumns(self._topic, self._brokers, self._broker_codes, self._int_columns)

    @staticmethod
    def from_rows(rows: list[dict[str, Any]]) -> TopicIndex:
        cols = {f: [r[f] for r in rows] for f in ("topic",) + QUEUE_FIELDS}
        return TopicIndex(pa.table({k: pa.array(v, pa.string() if k in ("topic", "brokerName") else pa.int32())
                                    for k, v in cols.items()}))

    def _bound(self, topic: str, *, right: bool) -> int:
        """Binary search over the sorted topic column (a few microseconds, no Python copy of it)."""
        lo, hi = 0, self._n
        col = self._topic
        while lo < hi:
            mid = (lo + hi) // 2
            value = col[mid].as_py()
            if value < topic or (right and value == topic):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _range(self, topic: str) -> tuple[int, int]:
        start = self._bound(topic, right=False)
        if start >= self._n or self._topic[start].as_py() != topic:
            return start, start
        return start, self._bound(topic, right=True)

    def __getitem__(self, topic: str) -> list[dict[str, Any]]:
        found = self._cache.get(topic)
        if found is not None:
            return found
        if not isinstance(topic, str):
            raise KeyError(topic)
        start, stop = self._range(topic)
        if start == stop:
            raise KeyError(topic)
        qds = [{"brokerName": self._brokers[self._broker_codes[r]],
                **{f: int(self._int_columns[f][r]) for f in QUEUE_FIELDS[1:]}} for r in range(start, stop)]
        qds.sort(key=lambda q: q["brokerName"])
        self._cache[topic] = qds  # a racing thread builds the same list; either may win
        return qds

    def __contains__(self, topic: object) -> bool:
        if topic in self._cache:
            return True
        if not isinstance(topic, str):
            return False
        start, stop = self._range(topic)
        return stop > start

    def _all_names(self) -> list[str]:
        if self._names is None:
            self._names = pc.unique(self._topic).to_pylist()  # sorted: the column is
        return self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._all_names())

    def __len__(self) -> int:
        return len(self._all_names())

    def topic_keys_of(self, broker_name: str) -> str:
        """routeinfo.state.topic_keys_digest of the topics a broker group hosts here: a repeated
        registration is a liveness signal only while it names exactly them. The remoting front
        asks on its answering loop, so nothing is built for the whole fleet: the rows are ordered
        by group once (numpy), and each ask takes its group's topics (a few microseconds); a
        group's digest is kept for the index's life (shared by the cuts that share a topic_queue
        version)."""
        keys = self._group_keys
        found = keys.get(broker_name)
        if found is not None:
            return found
        if self._by_group is None:
            order = np.argsort(self._broker_codes, kind="stable")  # topic order kept within a group
            self._by_group = (order, self._broker_codes[order], {n: i for i, n in enumerate(self._brokers)})
        order, codes, code_of = self._by_group
        code = code_of.get(broker_name)
        if code is None:
            return topic_keys_digest(())
        lo, hi = np.searchsorted(codes, code, "left"), np.searchsorted(codes, code, "right")
        digest = keys[broker_name] = topic_keys_digest(self._topic.take(pa.array(order[lo:hi])).to_pylist())
        return digest

    def row_count(self) -> int:
        return int(self._n)
