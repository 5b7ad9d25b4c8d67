"""Flask application factory: nothing happens at import time; tests build their own app."""

from __future__ import annotations

from flask import Flask
from werkzeug.routing import PathConverter

from conf import Config
from conf.tokens import admin_token
from eventlog.lag import LagProbe
from eventlog.publisher import EventPublisher, ReconnectingPublisher
from schemas.metrics import ServerMetrics, SnapshotMetrics
from serving import admin, cluster, dashboard, errors, health, history, kv, metrics, openapi, routes, writes
from serving.context import EXTENSION, stamp_snapshot
from serving.fastpath import RouteBodies
from serving.metrics import ServedCutCollector
from serving.snapshot_store import SnapshotReader, SnapshotStore


class AnythingConverter(PathConverter):
    regex = "(?s:[^/].*?)"


def create_app(cfg: Config, *, start_refresher: bool = True) -> Flask:
    app = Flask("namesrv", static_folder=None)
    app.config["NAMESRV"] = cfg
    app.json.sort_keys = True  # type: ignore[attr-defined]
    # KV keys are arbitrary strings: slashes and control characters (a newline) included, which
    # werkzeug's path converter does not match; the handlers validate what they get.
    app.url_map.converters["anything"] = AnythingConverter
    app.config["MAX_CONTENT_LENGTH"] = 1024 * 1024
    m = ServerMetrics()
    snapshots = SnapshotStore(SnapshotReader(cfg.warehouse), cfg.refresh_interval_ms / 1000,
                              retention_ms=cfg.history_retention_ms, metrics=SnapshotMetrics(m.registry))
    m.registry.register(ServedCutCollector(snapshots, LagProbe(cfg.bootstrap, cfg.kafka_topic)))
    snapshots.refresh()
    if start_refresher:
        snapshots.start()
    app.extensions[EXTENSION] = snapshots
    app.extensions[metrics.EXTENSION] = m
    app.extensions[writes.TOKEN] = admin_token(cfg)
    app.extensions[writes.PUBLISHER] = ReconnectingPublisher(
        lambda: EventPublisher(cfg.bootstrap, cfg.kafka_topic, max_message_bytes=cfg.max_message_bytes))
    errors.register(app)
    app.before_request(metrics.name_endpoint)
    app.after_request(stamp_snapshot)
    for bp in (routes.bp, cluster.bp, kv.bp, admin.bp, history.bp, health.bp, openapi.bp, metrics.bp, dashboard.bp):
        app.register_blueprint(bp)
    app.wsgi_app = metrics.Instrumented(RouteBodies(app.wsgi_app, snapshots), m)  # type: ignore[method-assign]
    return app
