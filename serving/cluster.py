"""Blueprint: cluster info and broker lookups (106, brokerLiveTable, 322, 901, a slave's master)."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request
from flask.typing import ResponseReturnValue

from routeinfo import route_reads
from schemas.fields import validate_addr, validate_name
from serving.context import snapshot
from serving.params import parse_int

bp = Blueprint("cluster", __name__)


@bp.get("/cluster")
def cluster() -> ResponseReturnValue:
    return Response(route_reads.cluster_info_body(snapshot()), mimetype="application/json")  # once per cut


@bp.get("/brokers/live")
def brokers_live() -> ResponseReturnValue:
    return jsonify(route_reads.live_brokers(snapshot()))


@bp.get("/brokers/<cluster>/<broker_addr>/data-version")
def data_version(cluster: str, broker_addr: str) -> ResponseReturnValue:
    validate_name(cluster, "cluster")
    validate_addr(broker_addr, "brokerAddr")
    fields = ("counter", "timestamp", "stateVersion")
    given = {f: request.args.get(f) for f in fields}
    asked = None
    if any(v is not None for v in given.values()):
        asked = {f: parse_int(given[f] or "0", f) for f in fields}
    return jsonify(route_reads.data_version(snapshot(), cluster, broker_addr, asked))


@bp.get("/brokers/<broker_name>/master")
def master(broker_name: str) -> ResponseReturnValue:
    validate_name(broker_name, "brokerName")
    cluster = request.args.get("cluster")
    if cluster is not None:
        validate_name(cluster, "cluster")
    return jsonify(route_reads.master_of(snapshot(), broker_name, cluster))


@bp.get("/brokers/<cluster>/<broker_name>/members")
def members(cluster: str, broker_name: str) -> ResponseReturnValue:
    validate_name(cluster, "cluster")
    validate_name(broker_name, "brokerName")
    return jsonify(route_reads.member_group(snapshot(), cluster, broker_name))
