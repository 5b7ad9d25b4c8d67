"""The pure KVConfigManager (routeinfo.kv_manager)."""

from __future__ import annotations

from routeinfo import kv_manager as kv
from schemas import events as ev


def put(k, v, ns="ns"):
    return {"type": ev.PUT_KV_CONFIG, "namespace": ns, "key": k, "value": v, "time": 0}


def delete(k, ns="ns"):
    return {"type": ev.DELETE_KV_CONFIG, "namespace": ns, "key": k, "time": 0}


def test_put_creates_namespace_and_overwrites():
    s, changes = kv.apply(None, [put("a", "1"), put("a", "2"), put("b", "3")])
    assert s.table == {"a": "2", "b": "3"}
    assert [(c["kind"], c["key"], c["before"], c["after"], c["eventIndex"]) for c in changes] == [
        ("KV_PUT", "a", None, "1", 0), ("KV_PUT", "a", "1", "2", 1), ("KV_PUT", "b", None, "3", 2)]
    assert kv.table_rows(s) == [{"namespace": "ns", "key": "a", "value": "2"},
                                {"namespace": "ns", "key": "b", "value": "3"}]


def test_same_value_is_no_change():
    s, _ = kv.apply(None, [put("a", "1")])
    s, changed = kv.apply(s, [put("a", "1")])
    assert not changed


def test_delete_of_absent_key_or_namespace_changes_nothing():
    assert kv.apply(None, [delete("a")]) == (None, [])
    s, _ = kv.apply(None, [put("a", "1")])
    assert kv.apply(s, [delete("zz")])[1] == []


def test_empty_namespace_survives_its_last_delete():
    s, _ = kv.apply(None, [put("a", "1")])
    s, changes = kv.apply(s, [delete("a")])
    assert [c["kind"] for c in changes] == ["KV_DELETED"] and s is not None and s.table == {}
    assert kv.table_rows(s) == [{"namespace": "ns", "key": None, "value": None}]


def test_json_round_trip():
    s, _ = kv.apply(None, [put("a", "1")])
    assert kv.Namespace.from_json(s.to_json()) == s
