"""topic → QueueDatas over a cut's topic_queue table, built with Arrow and NumPy, not per row.

A snapshot with a million queue rows must load in well under a second and never block a
lookup, so loading only encodes and sorts columns (dictionary-encode the topic, a stable
argsort of its codes); a topic's QueueData dicts are built when it is first asked for and
kept for the life of the snapshot. Behaves as a read-only Mapping for the views.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

QUEUE_FIELDS = ("brokerName", "perm", "readQueueNums", "topicSysFlag", "writeQueueNums")


class TopicIndex(Mapping):
    def __init__(self, table: pa.Table) -> None:
        n = table.num_rows
        topic = pc.dictionary_encode(table.column("topic").combine_chunks()) if n else None
        self._names: list[str] = topic.dictionary.to_pylist() if n else []
        self._pos = dict(zip(self._names, range(len(self._names))))
        codes = topic.indices.to_numpy() if n else np.zeros(0, dtype=np.int32)
        self._order = np.argsort(codes, kind="stable")
        self._starts = np.concatenate([[0], np.cumsum(np.bincount(codes, minlength=len(self._names)))])
        broker = pc.dictionary_encode(table.column("brokerName").combine_chunks()) if n else None
        self._brokers: list[str] = broker.dictionary.to_pylist() if n else []
        self._broker_codes = broker.indices.to_numpy() if n else codes
        self._ints = {f: table.column(f).to_numpy() for f in QUEUE_FIELDS[1:]} if n else {}
        self._cache: dict[str, list[dict[str, Any]]] = {}

    @staticmethod
    def from_rows(rows: list[dict[str, Any]]) -> "TopicIndex":
        cols = {f: [r[f] for r in rows] for f in ("topic",) + QUEUE_FIELDS}
        return TopicIndex(pa.table({k: pa.array(v, pa.string() if k in ("topic", "brokerName") else pa.int32())
                                    for k, v in cols.items()}))

    def __getitem__(self, topic: str) -> list[dict[str, Any]]:
        found = self._cache.get(topic)
        if found is not None:
            return found
        i = self._pos[topic]
        rows = self._order[self._starts[i]:self._starts[i + 1]]
        qds = [{"brokerName": self._brokers[self._broker_codes[r]],
                **{f: int(self._ints[f][r]) for f in QUEUE_FIELDS[1:]}} for r in rows]
        qds.sort(key=lambda q: q["brokerName"])
        self._cache[topic] = qds  # a racing thread builds the same list; either may win
        return qds

    def __contains__(self, topic: object) -> bool:
        return topic in self._pos

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def row_count(self) -> int:
        return len(self._order)
