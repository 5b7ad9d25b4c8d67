"""KVConfigManager as a pure state machine over one namespace (§8).

A namespace is created by its first put and, as in RocketMQ, survives the deletion of its
last key (GET then answers an empty table, not "not found"). The runtime switches
(UPDATE_NAMESRV_CONFIG) are the same put-only machine over the scope "namesrv".
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from schemas import events as ev


@dataclass
class Namespace:
    name: str
    table: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"namespace": self.name, "table": self.table}, sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> Namespace:
        raw = json.loads(text)
        return Namespace(raw["namespace"], raw["table"])


def apply(state: Namespace | None, events: Iterable[dict[str, Any]]) -> tuple[Namespace | None, list[dict[str, Any]]]:
    """Apply PUT/DELETE_KV_CONFIG (or UPDATE_NAMESRV_CONFIG) events in order.

    Returns the state and the changes made (for `route_changes`; empty = nothing changed).
    """
    changes: list[dict[str, Any]] = []
    for i, e in enumerate(events):
        if e["type"] in (ev.PUT_KV_CONFIG, ev.UPDATE_NAMESRV_CONFIG):
            if state is None:
                state = Namespace(e.get("namespace", CONFIG_SCOPE))
            before = state.table.get(e["key"])
            if before != e["value"]:
                state.table[e["key"]] = e["value"]
                kind = "CONFIG_UPDATED" if e["type"] == ev.UPDATE_NAMESRV_CONFIG else "KV_PUT"
                changes.append(_change(kind, state.name, e, i, before, e["value"]))
        elif e["type"] == ev.DELETE_KV_CONFIG:
            before = None if state is None else state.table.pop(e["key"], None)
            if state is not None and before is not None:
                changes.append(_change("KV_DELETED", state.name, e, i, before, None))
    return state, changes


def _change(kind: str, namespace: str, e: dict[str, Any], index: int, before: Any, after: Any) -> dict[str, Any]:
    return {"kind": kind, "namespace": namespace, "key": e["key"], "before": before, "after": after,
            "eventIndex": index, "time": e["time"]}


def table_rows(state: Namespace | None) -> list[dict[str, Any]]:
    if state is None:
        return []
    if not state.table:
        return [{"namespace": state.name, "key": None, "value": None}]
    return [{"namespace": state.name, "key": k, "value": v} for k, v in sorted(state.table.items())]


def config_rows(state: Namespace | None) -> list[dict[str, Any]]:
    if state is None:
        return []
    return [{"scope": state.name, "key": k, "value": v} for k, v in sorted(state.table.items())]


CONFIG_SCOPE = "namesrv"


# ---------------------------------------------------------------- reads (HTTP and remoting alike)

class KvNotFound(LookupError):
    """No such namespace or key in a cut; str() is RocketMQ's remark (QUERY_NOT_FOUND)."""


def read_value(kv: Mapping[str, Mapping[str, str]], namespace: str | None, key: str | None) -> str:
    """GET_KV_CONFIG (101): the value, or KvNotFound with RocketMQ's remark (an absent name prints as null)."""
    value = kv.get(namespace or "", {}).get(key or "")
    if value is None:
        raise KvNotFound(f"No config item, Namespace: {namespace} Key: {key}")
    return value


def read_namespace(kv: Mapping[str, Mapping[str, str]], namespace: str | None) -> Mapping[str, str]:
    """GET_KVLIST_BY_NAMESPACE (219): the namespace's table (empty once its last key went), or KvNotFound."""
    table = kv.get(namespace or "")
    if table is None:
        raise KvNotFound(f"No config item, Namespace: {namespace}")
    return table
