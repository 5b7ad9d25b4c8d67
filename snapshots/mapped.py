"""The served cut of a serving process, built from the host's shared cut file (issue 36).

A serving process used to load every cut from Delta itself (Arrow, then Python rows) and encode
route bodies on first lookup; now the host's builder (`snapshots.cutbuilder`) writes each cut once
and every serving process maps the file: a `Snapshot` whose `cut` is the mapping (route and
cluster-info bodies, topic names, per-group topics) and whose other tables come from the file's
JSON rows. No Delta and no Arrow on this path; past cuts (`snapshots.history`) still come from
Delta.

`FileTopics` stands in for the TopicIndex under `snap.topics`, so the reads that want QueueDatas
(a topic list by flag, the dashboard, a history diff against the served cut) still have them: a
topic's QueueDatas are its route body's `queueDatas` (`topic_route` copies them whole), and the
few topics with queue rows but no route (no BrokerData for any of them) have theirs in the file's
rest (`orphanQueues`). The hot reads (`route_reads`) use the mapping directly.

A cut that only moved heartbeats costs a serving process the file's head alone: the store opens it
sharing the served cut's mapping of the index part (`CutFile.open(reuse=...)`), and
`mapped_snapshot(cut, previous)` takes the served cut's brokers, clusters, filter servers, KV and
switches as they are when the head's tables are the same (`tables_digest`), reading only the
snapshots row and the live table.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from routeinfo.snapshot import Snapshot, build_snapshot
from routeinfo.state import topic_keys_digest
from routeinfo.topic_index import TopicIndex
from schemas import tables as t
from snapshots.cutfile import NO_BODY, ORPHANS, CutFile

FileMark = tuple[int, int, int]  # (inode, mtime_ns, size): a replaced file is a new inode


class FileTopics(TopicIndex):
    """topic -> QueueDatas of a mapped cut (read-only), standing in for the TopicIndex a cut
    loaded from Delta has: every method the reads use is answered from the file (none of the
    index's Arrow columns exists here, so its constructor is not run)."""

    def __init__(self, cut: CutFile, orphans: dict[str, list[dict[str, Any]]],
                 group_keys: dict[str, str] | None = None) -> None:
        """`group_keys`: the digests of groups' topics of a cut over the same index part, to go on
        filling (one dict for both: a racing fill computes the same value)."""
        self.cut = cut
        self._orphans = orphans
        self._group_keys: dict[str, str] = {} if group_keys is None else group_keys

    @property
    def orphans(self) -> Mapping[str, list[dict[str, Any]]]:
        """QueueDatas of the topics the file holds no route for (queue rows, no BrokerData)."""
        return self._orphans

    def _queues(self, topic: str, body: memoryview | None) -> list[dict[str, Any]]:
        if body is None:
            return self._orphans[topic]
        queues: list[dict[str, Any]] = json.loads(bytes(body))["queueDatas"]
        return queues

    def __getitem__(self, topic: str) -> list[dict[str, Any]]:
        if topic not in self.cut:
            raise KeyError(topic)
        return self._queues(topic, self.cut.route_body(topic))

    def __contains__(self, topic: object) -> bool:
        return topic in self.cut

    def __iter__(self) -> Iterator[str]:
        return self.cut.topic_names()

    def __len__(self) -> int:
        return int(self.cut.topic_count)

    def items(self) -> Iterator[tuple[str, list[dict[str, Any]]]]:  # type: ignore[override]
        """Every topic with its QueueDatas, each distinct body decoded once (a listing by flag
        walks the whole cut; a fleet has far fewer distinct bodies than topics)."""
        decoded: dict[int, list[dict[str, Any]]] = {}
        for topic, b in self.cut.topic_bodies():
            if b == NO_BODY:
                yield topic, self._orphans[topic]
                continue
            queues = decoded.get(b)
            if queues is None:
                queues = decoded[b] = self._queues(topic, self.cut.body(b))
            yield topic, [dict(q) for q in queues]

    def values(self) -> Iterator[list[dict[str, Any]]]:  # type: ignore[override]
        return (queues for _, queues in self.items())

    def topic_keys_of(self, broker_name: str) -> str:
        """`TopicIndex.topic_keys_of`, from the file's per-group section (kept per group)."""
        found = self._group_keys.get(broker_name)
        if found is None:
            found = self._group_keys[broker_name] = topic_keys_digest(self.cut.topics_of_group(broker_name))
        return found

    def row_count(self) -> int:
        return int(self.cut.topic_count)


def file_mark(path: Path) -> FileMark | None:
    """What identifies the file now at `path` (None: there is none): the store's watch stats it."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def mapped_snapshot(cut: CutFile, previous: Snapshot | None = None) -> Snapshot:
    """The served cut over a mapped file: its topics and bodies the mapping's, the rest its rows.

    `previous`: the cut served until now. When its file's head has the same tables as this one
    (`tables_digest`: brokers, clusters, filter servers, KV, switches and the orphans' queues, so
    the cluster info and the holders too), the new cut is `previous` with this file's snapshots
    row and live table: the same Snapshot `build_snapshot` makes from all the rows, for the JSON
    of the live table alone (about half a heartbeat cut's rows at 10,000 brokers)."""
    before = None if previous is None else previous.cut
    if previous is not None and isinstance(before, CutFile) and isinstance(previous.topics, FileTopics) \
            and before.tables_digest == cut.tables_digest:
        shared = previous.topics._group_keys if cut.shares_index_with(before) else None
        topics = FileTopics(cut, previous.topics._orphans, shared)
        live = cut.rest_live()
        return previous.with_live(live["snapshot"], topics, live[t.BROKER_LIVE.name], cut)
    rest = cut.rest()
    topics = FileTopics(cut, rest.get(ORPHANS) or {})
    return build_snapshot(rest["snapshot"], {t.TOPIC_QUEUE.name: topics, **rest["tables"]}, cut=cut)
