"""Blueprint: admin commands (205/327 write perms, 216 delete topic, 217 register topic, 318/319 config).

Each publishes events and, by default, answers once the served snapshot includes them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, current_app, jsonify, request
from flask.typing import ResponseReturnValue

from conf import Config
from routeinfo import admin_fanout, route_reads
from schemas import events as ev
from schemas import fields
from serving import writes
from serving.context import snapshot

bp = Blueprint("admin", __name__)


def _perm_command(broker_name: str, build: Callable[[str], dict[str, Any]], field: str) -> ResponseReturnValue:
    fields.validate_name(broker_name, "brokerName")
    snap, coords = writes.publish([build(broker_name)])
    if snap is None:
        return writes.accepted(coords)
    return jsonify({field: route_reads.topics_hosted_by(snap, broker_name)})


@bp.post("/brokers/<broker_name>/wipe-write-perm")
@writes.authorized
def wipe_write_perm(broker_name: str) -> ResponseReturnValue:
    return _perm_command(broker_name, ev.wipe_write_perm_event, "wipeTopicCount")


@bp.post("/brokers/<broker_name>/add-write-perm")
@writes.authorized
def add_write_perm(broker_name: str) -> ResponseReturnValue:
    return _perm_command(broker_name, ev.add_write_perm_event, "addTopicCount")


@bp.delete("/topics/<topic>")
@writes.authorized
def delete_topic(topic: str) -> ResponseReturnValue:
    fields.validate_topic(topic)
    cluster = request.args.get("cluster") or None
    if cluster is not None:
        fields.validate_name(cluster, "cluster")
    events = admin_fanout.delete_topic(snapshot(), topic, cluster)
    snap, coords = writes.publish(events)
    if snap is None:
        return writes.accepted(coords)
    return jsonify(code="SUCCESS", brokerNames=[e["brokerName"] for e in events])


@bp.put("/topics/<topic>/route")
@writes.authorized
def register_topic(topic: str) -> ResponseReturnValue:
    fields.validate_topic(topic)
    raw = writes.json_body().get("queueDatas")
    if not isinstance(raw, list):
        raise fields.InvalidInput("body must be {\"queueDatas\": [QueueData, ...]}")
    queue_datas: list[dict[str, Any]] = []
    for i, q in enumerate(raw):
        if not isinstance(q, dict):
            raise fields.InvalidInput(f"queueDatas[{i}] must be an object")
        queue_datas.append({"brokerName": fields.validate_name(q.get("brokerName"), f"queueDatas[{i}].brokerName"),
                            **fields.queue_fields(q, f"queueDatas[{i}]")})
    events = admin_fanout.register_topic(snapshot(), topic, queue_datas)
    snap, coords = writes.publish(events)
    if snap is None:
        return writes.accepted(coords)
    body: dict[str, Any] = {"code": "SUCCESS", "brokerNames": [e["brokerName"] for e in events]}
    if len(events) < len(queue_datas):
        body["remark"] = "unknown broker(s): " + ", ".join(
            q["brokerName"] for q in queue_datas if q["brokerName"] not in snap.brokers)
    return jsonify(body)


@bp.get("/config")
def get_config() -> ResponseReturnValue:
    cfg: Config = current_app.config["NAMESRV"]
    return jsonify(config=snapshot().switches, readOnly=cfg.read_only_facts)


@bp.put("/config")
@writes.authorized
def put_config() -> ResponseReturnValue:
    body = writes.json_body()
    if not body:
        raise fields.InvalidInput("body must name at least one switch")
    events = [ev.update_config_event(k, ev.validate_switch(k, v)) for k, v in body.items()]
    snap, coords = writes.publish(events)
    if snap is None:
        return writes.accepted(coords)
    return jsonify(config=snap.switches)
