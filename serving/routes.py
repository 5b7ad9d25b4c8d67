"""Blueprint: topic routes and topic lists (GET_ROUTEINFO_BY_TOPIC and the topic-list codes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response, jsonify, request
from flask.typing import ResponseReturnValue

from routeinfo import route_reads
from schemas.fields import validate_name
from serving.context import snapshot
from serving.errors import ApiError, topic_not_exist

bp = Blueprint("routes", __name__)


@bp.get("/topics/<topic>/route")
def topic_route(topic: str) -> ResponseReturnValue:
    zone = request.args.get("zone")
    snap = snapshot()
    if zone:
        route = route_reads.topic_route(snap, topic, zone=validate_name(zone, "zone"))
        if route is None:
            raise topic_not_exist(topic)
        return jsonify(route)
    body = route_reads.route_body(snap, topic)  # the hot path: serialized once per cut
    if body is None:
        raise topic_not_exist(topic)
    return Response(body, mimetype="application/json")


def _listed(build: Callable[[], Any]) -> ResponseReturnValue:
    try:
        return jsonify(build())
    except route_reads.Disabled:
        raise ApiError(403, "SYSTEM_ERROR", "disable") from None


@bp.get("/topics")
def topics() -> ResponseReturnValue:
    return _listed(lambda: route_reads.all_topics(snapshot()))


@bp.get("/clusters/<cluster>/topics")
def cluster_topics(cluster: str) -> ResponseReturnValue:
    validate_name(cluster, "cluster")
    return _listed(lambda: route_reads.topics_by_cluster(snapshot(), cluster))


@bp.get("/topics/system")
def system_topics() -> ResponseReturnValue:
    return jsonify(route_reads.system_topics(snapshot()))


@bp.get("/topics/unit")
def unit_topics() -> ResponseReturnValue:
    return _listed(lambda: route_reads.unit_topics(snapshot(), "unit"))


@bp.get("/topics/unit-sub")
def unit_sub_topics() -> ResponseReturnValue:
    return _listed(lambda: route_reads.unit_topics(snapshot(), "unit-sub"))


@bp.get("/topics/unit-sub-ununit")
def unit_sub_ununit_topics() -> ResponseReturnValue:
    return _listed(lambda: route_reads.unit_topics(snapshot(), "unit-sub-ununit"))
