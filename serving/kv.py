"""Blueprint: KV config (§8): reads from the snapshot, writes as PUT/DELETE_KV_CONFIG events."""

from __future__ import annotations

from flask import Blueprint, jsonify
from flask.typing import ResponseReturnValue

from routeinfo import kv_manager
from schemas import events as ev
from schemas import fields
from serving import writes
from serving.context import snapshot
from serving.errors import ApiError

bp = Blueprint("kv", __name__)


def _namespace(ns: str) -> str:
    return fields.validate_name(ns, "namespace")


def _key(key: str) -> str:
    if not key or len(key) > 1024:
        raise fields.InvalidInput("key must be 1 to 1024 characters")
    return key


@bp.get("/kv/<namespace>")
def get_namespace(namespace: str) -> ResponseReturnValue:
    try:
        return jsonify(table=kv_manager.read_namespace(snapshot().kv, _namespace(namespace)))
    except kv_manager.KvNotFound as exc:
        raise ApiError(404, "QUERY_NOT_FOUND", str(exc)) from None


@bp.get("/kv/<namespace>/<anything:key>")
def get_value(namespace: str, key: str) -> ResponseReturnValue:
    try:
        return jsonify(value=kv_manager.read_value(snapshot().kv, _namespace(namespace), key))
    except kv_manager.KvNotFound as exc:
        raise ApiError(404, "QUERY_NOT_FOUND", str(exc)) from None


@bp.put("/kv/<namespace>/<anything:key>")
@writes.authorized
def put_value(namespace: str, key: str) -> ResponseReturnValue:
    value = writes.json_body().get("value")
    if not isinstance(value, str):
        raise fields.InvalidInput("body must be {\"value\": \"<string>\"}")
    snap, coords = writes.publish([ev.put_kv_event(_namespace(namespace), _key(key), value)])
    if snap is None:
        return writes.accepted(coords)
    return jsonify(value=snap.kv.get(namespace, {}).get(key))


@bp.delete("/kv/<namespace>/<anything:key>")
@writes.authorized
def delete_value(namespace: str, key: str) -> ResponseReturnValue:
    snap, coords = writes.publish([ev.delete_kv_event(_namespace(namespace), _key(key))])
    if snap is None:
        return writes.accepted(coords)
    return jsonify(code="SUCCESS")
