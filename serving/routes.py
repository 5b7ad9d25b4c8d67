"""Blueprint: topic routes and topic lists (GET_ROUTEINFO_BY_TOPIC, GET_ALL_TOPIC_LIST)."""

from __future__ import annotations

from flask import Blueprint, jsonify

from serving import views
from serving.app_state import snapshot
from serving.errors import topic_not_exist

bp = Blueprint("routes", __name__)


@bp.get("/topics/<topic>/route")
def topic_route(topic: str):
    route = views.topic_route(snapshot(), topic)
    if route is None:
        raise topic_not_exist(topic)
    return jsonify(route)


@bp.get("/topics")
def topics():
    return jsonify(views.all_topics(snapshot()))
