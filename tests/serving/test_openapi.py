"""The OpenAPI document stays in step with the Flask routes, and is a valid document."""

from __future__ import annotations

import re

from conf import load_config
from serving.app import create_app
from serving.openapi import document
from serving.watch import CLUSTER_PATH, TOPIC_PREFIX, TOPIC_SUFFIX


def flask_operations(app) -> set[tuple[str, str]]:
    ops = set()
    for rule in app.url_map.iter_rules():
        path = re.sub(r"<(?:[a-z]+:)?([a-zA-Z_]+)>", r"{\1}", rule.rule)
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            ops.add((path, method.lower()))
    return ops


def test_every_route_is_documented_and_every_documented_route_exists(tmp_path):
    app = create_app(load_config({"NAMESRV_DATA_DIR": str(tmp_path)}))
    documented = {(p, m) for p, item in document()["paths"].items() for m in item}
    # the watch streams are answered by the RSGI front's event loop (serving/asgi.py), not by Flask
    streams = {(TOPIC_PREFIX + "{topic}" + TOPIC_SUFFIX, "get"), (CLUSTER_PATH, "get")}
    assert streams <= documented
    assert flask_operations(app) == documented - streams


def test_path_parameters_are_declared(tmp_path):
    for path, item in document()["paths"].items():
        names = set(re.findall(r"{([a-zA-Z_]+)}", path))
        for method, op in item.items():
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert declared == names, f"{method.upper()} {path}"


def test_served_document_and_refs_resolve(tmp_path):
    app = create_app(load_config({"NAMESRV_DATA_DIR": str(tmp_path)}))
    doc = app.test_client().get("/openapi.json").json
    assert doc["openapi"].startswith("3.1")
    text = str(doc)
    for ref in set(re.findall(r"#/components/schemas/([A-Za-z]+)", text)):
        assert ref in doc["components"]["schemas"], ref
