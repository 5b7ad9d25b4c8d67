"""One consistent cut of the route tables, indexed for the read model (pure, no I/O).

`build_snapshot` turns the rows of one cut (as `snapshots.reader` loads them from Delta,
or as tests and the reference model produce them) into the lookups RocketMQ's reads need:
topic -> QueueDatas, brokerName -> BrokerData, cluster -> brokerNames, the live table by
address, filter servers, KV namespaces and the runtime switches.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypedDict

import pyarrow as pa

from routeinfo.topic_index import TopicIndex
from schemas import events as ev
from schemas import tables as t

# The order a cut's rows are indexed in, per table (`build_snapshot`). The reader sorts them so in
# Arrow first (`snapshots.reader`): Python's sort of presorted rows is one pass, where a sort in C
# would hold the GIL from a serving process's answering thread for the whole sort.
ROW_ORDER: dict[str, tuple[str, ...]] = {
    t.BROKER_ADDR.name: ("brokerName", "brokerId"),
    t.CLUSTER_ADDR.name: ("clusterName", "brokerName"),
    t.BROKER_LIVE.name: ("clusterName", "brokerAddr", "brokerName"),
}


def _in_order(table: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=operator.itemgetter(*ROW_ORDER[table]))


class SharedCut(Protocol):
    """The host's mapped cut file as the reads use it (`snapshots.cutfile.CutFile`): pre-encoded
    bodies handed out as views of the mapping, the topic names, and each group's topics."""

    def route_body(self, topic: str) -> memoryview | None: ...

    def cluster_info_body(self) -> memoryview: ...

    def topic_names(self) -> Iterator[str]: ...

    def topics_of_group(self, broker_name: str) -> list[str]: ...

    def __contains__(self, topic: object) -> bool: ...


@dataclass(frozen=True)
class Snapshot:
    """One consistent cut, indexed for lookups. Its route data never changes once built; only
    the caches of answers derived from it (`route_bodies`, the TopicIndex's QueueDatas) fill
    in on first use, and a racing fill computes the same value."""

    snapshot_id: int | None
    commit_time: int | None
    versions: dict[str, int]
    source_offsets: dict[str, int]
    topics: TopicIndex                               # topic -> QueueDatas (sorted by brokerName)
    brokers: dict[str, dict[str, Any]]               # brokerName -> BrokerData
    clusters: dict[str, list[str]]                   # clusterName -> brokerNames
    live: list[dict[str, Any]]
    filters: dict[tuple[str, str], list[str]]        # (cluster, addr) -> filter servers
    kv: dict[str, dict[str, str]] = field(default_factory=dict)
    switches: dict[str, bool] = field(default_factory=lambda: dict(ev.RUNTIME_SWITCHES))
    live_by_addr: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (cluster, addr) -> live row
    # (clusterName, brokerName) of every cluster_addr row: the registration checks ask whether a
    # group is in its cluster once per repeat, and `in` over a 10,000-name list was 30 % of the
    # remoting front's CPU at 10,000 brokers (py-spy, 2026-11-28).
    members: frozenset[tuple[str, str]] = field(default_factory=frozenset, compare=False, repr=False)
    # Serialized GET_ROUTEINFO_BY_TOPIC answers, built on a topic's first lookup in this cut
    # (RocketMQ's issue #10982 asks for the same): a hot topic costs one dict read after that.
    route_bodies: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)  # route_reads fills it
    # Serialized answers about the whole cut (GET_BROKER_CLUSTER_INFO), built on first use: every
    # 5.x broker asks for the cluster info every 5 s, and the answer lists the whole fleet.
    cut_bodies: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)
    # (cluster, addr) -> (brokerName, brokerId) holding it, built on first use (route_reads.holder_of):
    # a fleet's connections closing together each ask, and a scan of the fleet per close held the
    # remoting front for minutes at 100,000 brokers.
    holders: dict[tuple[str, str], tuple[str, int]] = field(default_factory=dict, compare=False, repr=False)
    # The mapped cut file this cut is served from (a serving process's newest cut: snapshots.mapped),
    # or None for a cut loaded from Delta (the builder's, history's, the tests'): the reads answer
    # from the mapping when there is one (route_reads).
    cut: SharedCut | None = field(default=None, compare=False, repr=False)

    @staticmethod
    def empty() -> Snapshot:
        return build_snapshot(None, {name: [] for name in (x.name for x in t.STATE_TABLES)})

    @classmethod
    def of(cls, *, snapshot_id: int | None, commit_time: int | None, versions: dict[str, int],
           source_offsets: dict[str, int], topics: TopicIndex, brokers: dict[str, dict[str, Any]],
           clusters: dict[str, list[str]], live: list[dict[str, Any]], filters: dict[tuple[str, str], list[str]],
           kv: dict[str, dict[str, str]], switches: dict[str, bool], cut: SharedCut | None = None) -> Snapshot:
        """The cut of these tables, with what is derived from them (`live_by_addr`, `members`)
        derived here and every cache empty: a caller cannot pass a derived field that disagrees
        with its tables. `live` in its ROW_ORDER (`live_by_addr` holds the first row of an address)."""
        return cls(snapshot_id=snapshot_id, commit_time=commit_time, versions=versions, source_offsets=source_offsets,
                   topics=topics, brokers=brokers, clusters=clusters, live=live, filters=filters, kv=kv,
                   switches=switches, live_by_addr=_live_by_addr(live),
                   members=frozenset((c, name) for c, names in clusters.items() for name in names), cut=cut)

    def with_live(self, row: dict[str, Any] | None, topics: TopicIndex, live_rows: list[dict[str, Any]],
                  cut: SharedCut | None) -> Snapshot:
        """This cut's brokers, clusters, filter servers, KV and switches with another cut's
        snapshots `row`, topics and live table: what `build_snapshot` makes of those rows and this
        cut's others (a mapped cut whose head has the same tables as the served one:
        `snapshots.mapped`), without indexing the others again. `members` and `holders` depend on
        the tables kept and are kept (shared); `live_by_addr` is rebuilt and the answers' caches
        start empty."""
        live = _in_order(t.BROKER_LIVE.name, live_rows)
        return replace(self, **_row_fields(row), topics=topics, live=live, live_by_addr=_live_by_addr(live),
                       route_bodies={}, cut_bodies={}, cut=cut)

    def with_topics(self, topics: TopicIndex) -> Snapshot:
        """This cut with other topics and every cache empty (the holders too): the cut file's
        writer encodes the route bodies of a few topics over a cut of those alone."""
        return replace(self, topics=topics, route_bodies={}, cut_bodies={}, holders={})


class _RowFields(TypedDict):
    snapshot_id: int | None
    commit_time: int | None
    versions: dict[str, int]
    source_offsets: dict[str, int]


def _row_fields(row: dict[str, Any] | None) -> _RowFields:
    """A Snapshot's fields from its `snapshots` row (None: no cut yet)."""
    return {"snapshot_id": None if row is None else row["snapshotId"],
            "commit_time": None if row is None else row["commitTime"],
            "versions": {} if row is None else {x.name: row[t.version_column(x)] for x in t.CUT_TABLES},
            "source_offsets": {} if row is None else json.loads(row["sourceOffsets"])}


def _live_by_addr(live: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(cluster, addr) -> its first live row."""
    by_addr: dict[tuple[str, str], dict[str, Any]] = {}
    for r in live:
        by_addr.setdefault((r["clusterName"], r["brokerAddr"]), r)
    return by_addr


def build_snapshot(row: dict[str, Any] | None, tables: dict[str, Any], cut: SharedCut | None = None) -> Snapshot:
    """Pure: index the rows of one cut (`tables`: table name -> rows; topic_queue may also be
    an Arrow table, which is how a load hands over the big one, or the TopicIndex of an earlier
    cut with the same topic_queue version) for the HTTP layer; `cut`: the host's cut file it was
    read from, if it was."""
    queues = tables[t.TOPIC_QUEUE.name]
    topics = (queues if isinstance(queues, TopicIndex) else
              TopicIndex(queues) if isinstance(queues, pa.Table) else TopicIndex.from_rows(queues))

    brokers: dict[str, dict[str, Any]] = {}
    for r in _in_order(t.BROKER_ADDR.name, tables[t.BROKER_ADDR.name]):
        bd = brokers.setdefault(r["brokerName"], {
            "brokerAddrs": {}, "brokerName": r["brokerName"], "cluster": r["cluster"],
            "enableActingMaster": r["enableActingMaster"]})
        if r["zoneName"] is not None:
            bd["zoneName"] = r["zoneName"]
        bd["brokerAddrs"][str(r["brokerId"])] = r["brokerAddr"]

    clusters: dict[str, list[str]] = {}
    for r in _in_order(t.CLUSTER_ADDR.name, tables[t.CLUSTER_ADDR.name]):
        clusters.setdefault(r["clusterName"], []).append(r["brokerName"])

    live = _in_order(t.BROKER_LIVE.name, tables[t.BROKER_LIVE.name])
    filters = {(r["clusterName"], r["brokerAddr"]): list(r["filterServer"]) for r in tables[t.FILTER_SERVER.name]}
    kv: dict[str, dict[str, str]] = {}
    for r in tables[t.KV_CONFIG.name]:
        ns = kv.setdefault(r["namespace"], {})
        if r["key"] is not None:
            ns[r["key"]] = r["value"]

    switches = dict(ev.RUNTIME_SWITCHES)
    for r in tables.get(t.NAMESRV_CONFIG.name, []):
        if r["key"] in switches:
            switches[r["key"]] = r["value"] == "true"
    return Snapshot.of(**_row_fields(row), topics=topics, brokers=brokers, clusters=dict(sorted(clusters.items())),
                       live=live, filters=filters, kv=kv, switches=switches, cut=cut)
