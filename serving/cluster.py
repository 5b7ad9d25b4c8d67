"""Blueprint: cluster info and live brokers (GET_BROKER_CLUSTER_INFO, brokerLiveTable)."""

from __future__ import annotations

from flask import Blueprint, jsonify

from serving import views
from serving.app_state import snapshot

bp = Blueprint("cluster", __name__)


@bp.get("/cluster")
def cluster():
    return jsonify(views.cluster_info(snapshot()))


@bp.get("/brokers/live")
def brokers_live():
    return jsonify(views.live_brokers(snapshot()))
