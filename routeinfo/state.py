"""The route data one broker group (one brokerName) owns, and how it is stored.

Every RocketMQ route table is keyed so that a broker group's rows never depend on another
group's events; this is the group's slice of all five (§1), plus chunked registrations still
being assembled. The streaming job keeps it in Spark's state store as two strings and
materializes it as Delta rows (`table_rows`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from schemas import json_codec
from schemas import tables as t
from schemas.fields import MASTER_ID


@dataclass
class BrokerData:
    cluster: str
    addrs: dict[int, str] = field(default_factory=dict)
    zone_name: str | None = None
    enable_acting_master: bool = False


@dataclass
class LiveInfo:
    broker_id: int | None
    last_update: int
    timeout_ms: int
    data_version: dict[str, int]
    ha_server_addr: str | None
    materialized_update: int = -1  # the lastUpdateTimestamp broker_live holds for this entry
    stale_since: int = -1          # when last_update first moved past materialized_update
    registered_offset: int = -1    # log offset of the address's newest registration (-1: unknown)


@dataclass
class PendingRegistration:
    """A chunked registration being assembled (one per registering address): nothing of it
    is visible until every chunk has arrived, then it applies as one REGISTER_BROKER."""

    count: int
    header: dict[str, Any]                     # the event minus topicConfigTable and chunk
    chunks: dict[int, dict[str, Any]]          # chunk index -> its slice of topicConfigTable
    last_time: int                             # event time of the newest chunk (abandon deadline)


def live_entry(cluster: str, addr: str, li: LiveInfo) -> list[Any]:
    """A live entry as the stored core lists it."""
    return [cluster, addr, li.broker_id, li.last_update, li.timeout_ms, li.data_version, li.ha_server_addr,
            li.materialized_update, li.stale_since, li.registered_offset]


def live_of_entry(entry: list[Any]) -> tuple[tuple[str, str], LiveInfo]:
    cluster, addr, *rest = entry
    return (cluster, addr), LiveInfo(*rest)


_LIVE_TIMES = (3, 7, 8)  # where `live_entry` lists last_update, materialized_update and stale_since


# A stored topic table longer than this is kept compressed (`pack_topics`).
PACK_OVER_BYTES = 512
_PACKED = "z:"


def pack_topics(table_json: str) -> str:
    """A topic table's JSON as the state store keeps it: compressed once it is long enough.

    Spark rewrites a key's whole state row whenever any part of it changes, and a heartbeat changes
    the liveness time: every batch a fleet's topic tables travel Python → JVM (pickled) → the state
    store's delta file, although they hardly ever change. Compressed they are a twelfth of the JSON
    (9,323 → 740 bytes for a default broker's 113 topics), and a table is compressed only when it
    changed and decompressed only when a rule reads it. Base64 keeps the state a string column, the
    schema every existing checkpoint has; a table stored as plain JSON (before this) still reads."""
    if len(table_json) <= PACK_OVER_BYTES:
        return table_json
    return _PACKED + base64.b64encode(zlib.compress(table_json.encode("utf-8"), 6)).decode("ascii")


def unpack_topics(stored: str) -> str:
    """The JSON of a topic table as `pack_topics` stored it."""
    if stored.startswith(_PACKED):
        return zlib.decompress(base64.b64decode(stored[len(_PACKED):])).decode("utf-8")
    return stored


class GroupState:
    """All route data owned by one brokerName.

    Persisted as two strings: a small core (broker, clusters, live, filters, pending chunks)
    and the topic table (`pack_topics`). Heartbeats and unchanged re-registrations only decode the
    core; the topic table is unpacked and parsed on first access (`topics`) and packed again only
    if it was touched.
    """

    def __init__(self, broker_name: str, clusters: set[str] | None = None, broker: BrokerData | None = None,
                 topics: dict[str, dict[str, int]] | None = None,
                 live: dict[tuple[str, str], LiveInfo] | None = None,
                 filters: dict[tuple[str, str], list[str]] | None = None,
                 pending: dict[tuple[str, str], PendingRegistration] | None = None,
                 *, topics_json: str | None = None, topic_keys: str | None = None) -> None:
        self.broker_name = broker_name
        self.clusters = clusters if clusters is not None else set()
        self.broker = broker
        self.live = live if live is not None else {}
        self.filters = filters if filters is not None else {}
        self.pending = pending if pending is not None else {}
        # The topic table is either decoded (_topics) or still as stored (_topics_json, `pack_topics`).
        self._topics: dict[str, dict[str, int]] = topics if topics is not None else {}
        self._topics_json = topics_json if topics is None else None
        self._topic_keys = topic_keys  # digest of the topic names, valid while _topics_json is set

    @property
    def topics(self) -> dict[str, dict[str, int]]:
        if self._topics_json is not None:
            self._topics = json.loads(unpack_topics(self._topics_json))
            self._topics_json = None
        return self._topics

    def has_topics(self) -> bool:
        # a packed table is never an empty one (too short to pack)
        return self._topics_json != "{}" if self._topics_json is not None else bool(self._topics)

    def topic_keys_digest(self) -> str:
        """A digest of the topic names, without decoding the topic table when it is not loaded."""
        if self._topics_json is not None and self._topic_keys is not None:
            return self._topic_keys
        return topic_keys_digest(self.topics)

    def is_empty(self) -> bool:
        return not (self.clusters or self.broker or self.has_topics() or self.live or self.filters or self.pending)

    def master(self) -> str | None:
        """The address registered as broker id 0, if any."""
        return None if self.broker is None else self.broker.addrs.get(MASTER_ID)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GroupState) and self.to_json() == other.to_json()

    def __repr__(self) -> str:
        return f"GroupState({self.to_json()})"

    # -- persistence (flat strings: nested state schemas break applyInPandasWithState)
    def to_parts(self) -> tuple[str, str]:
        """(core JSON, topic table as stored, `pack_topics`); an untouched topic table is returned
        as it was read."""
        return json_codec.dumps_sorted(self._core()), self._stored_topics()

    def signature(self) -> str:
        """Everything the group holds except its live entries' times (`lastUpdateTimestamp`, what
        broker_live holds of it, since when that is stale): what a liveness signal must not change."""
        core = self._core()
        for entry in core["live"]:
            for i in _LIVE_TIMES:
                entry[i] = None
        return json_codec.dumps_sorted(core) + "\n" + self._stored_topics()

    def _stored_topics(self) -> str:
        return self._topics_json if self._topics_json is not None else pack_topics(
            json_codec.dumps_sorted(self._topics))

    def _core(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "clusters": sorted(self.clusters),
            "broker": None if self.broker is None else {
                "cluster": self.broker.cluster,
                "addrs": {str(k): v for k, v in sorted(self.broker.addrs.items())},
                "zoneName": self.broker.zone_name,
                "enableActingMaster": self.broker.enable_acting_master,
            },
            "topicKeys": self.topic_keys_digest(),
            "live": [live_entry(c, a, li) for (c, a), li in sorted(self.live.items())],
            "filters": [[c, a, lst] for (c, a), lst in sorted(self.filters.items())],
            "pending": [[c, a, p.count, p.header, [[i, p.chunks[i]] for i in sorted(p.chunks)], p.last_time]
                        for (c, a), p in sorted(self.pending.items())],
        }

    @staticmethod
    def from_parts(core_json: str, topics_json: str) -> GroupState:
        """`topics_json`: the topic table as `to_parts` stored it (packed or plain JSON)."""
        raw = json.loads(core_json)
        b = raw["broker"]
        return GroupState(
            broker_name=raw["brokerName"],
            clusters=set(raw["clusters"]),
            broker=None if b is None else BrokerData(
                b["cluster"], {int(k): v for k, v in b["addrs"].items()}, b["zoneName"], b["enableActingMaster"]),
            live=dict(live_of_entry(entry) for entry in raw["live"]),
            filters={(c, a): lst for c, a, lst in raw["filters"]},
            pending={(c, a): PendingRegistration(n, header, {int(i): tbl for i, tbl in chunks}, last)
                     for c, a, n, header, chunks, last in raw.get("pending", [])},
            topics_json=topics_json, topic_keys=raw.get("topicKeys"),
        )

    def to_json(self) -> str:
        """One string (tests and debugging); the pipeline stores `to_parts`."""
        core, topics = self.to_parts()
        return json.dumps([json.loads(core), json.loads(unpack_topics(topics))], separators=(",", ":"), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> GroupState:
        core, topics = json.loads(text)
        return GroupState.from_parts(json.dumps(core), json.dumps(topics))



def topic_keys_digest(names: Iterable[str]) -> str:
    """Order-independent digest of topic names (a topic table's keys; re-registrations compare it)."""
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(names):
        h.update(name.encode())
        h.update(b"\0")
    return h.hexdigest()


def table_rows(state: GroupState | None, table: str) -> list[dict[str, Any]]:
    """The rows of `table` owned by this group, in a deterministic order."""
    if state is None:
        return []
    name = state.broker_name
    if table == t.TOPIC_QUEUE.name:
        return [{"topic": topic, "brokerName": name, **qd} for topic, qd in sorted(state.topics.items())]
    if table == t.BROKER_ADDR.name:
        b = state.broker
        if b is None:
            return []
        return [{"brokerName": name, "cluster": b.cluster, "brokerId": bid, "brokerAddr": addr,
                 "zoneName": b.zone_name, "enableActingMaster": b.enable_acting_master}
                for bid, addr in sorted(b.addrs.items())]
    if table == t.CLUSTER_ADDR.name:
        return [{"clusterName": c, "brokerName": name} for c in sorted(state.clusters)]
    if table == t.BROKER_LIVE.name:
        return [live_row(name, c, a, li) for (c, a), li in sorted(state.live.items())]
    if table == t.FILTER_SERVER.name:
        return [{"clusterName": c, "brokerAddr": a, "brokerName": name, "filterServer": list(lst)}
                for (c, a), lst in sorted(state.filters.items())]
    raise KeyError(table)


def live_row(broker_name: str, cluster: str, addr: str, li: LiveInfo) -> dict[str, Any]:
    """One broker_live row: the `lastUpdateTimestamp` it holds is the one materialized."""
    return {"clusterName": cluster, "brokerAddr": addr, "brokerName": broker_name, "brokerId": li.broker_id,
            "lastUpdateTimestamp": li.materialized_update, "heartbeatTimeoutMillis": li.timeout_ms,
            "dataVersion": dump_data_version(li.data_version), "haServerAddr": li.ha_server_addr}


def dump_data_version(dv: dict[str, int]) -> str:
    return json.dumps({"counter": dv["counter"], "stateVersion": dv["stateVersion"],
                       "timestamp": dv["timestamp"]}, separators=(",", ":"))
