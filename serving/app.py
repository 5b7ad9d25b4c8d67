"""Flask application factory: nothing happens at import time, and the factory only wires (config,
blueprints, error handlers, the resources' objects): it reads no table, starts no thread and opens
no connection. The snapshot store's first refresh and refresher thread, and closing the Kafka
clients, are `serving.lifecycle.start` / `stop`, which the entry point that serves calls
(`serving.wsgi`); tests build their own app and start it only when they want it refreshing."""

from __future__ import annotations

from flask import Flask
from werkzeug.routing import PathConverter

from conf import Config
from conf.tokens import admin_token
from eventlog.journal import AdminJournal
from eventlog.lag import LagProbe
from eventlog.publisher import EventPublisher, ReconnectingPublisher
from schemas.metrics import ServerMetrics, SnapshotMetrics
from serving import admin, cluster, dashboard, errors, health, history, kv, lifecycle, metrics, openapi, risks, routes, writes
from serving.context import stamp_snapshot
from serving.fastpath import RouteBodies
from serving.metrics import ServedCutCollector
from snapshots.cutbuilder import serving_store


class AnythingConverter(PathConverter):
    regex = "(?s:[^/].*?)"


def create_app(cfg: Config) -> Flask:
    app = Flask("namesrv", static_folder=None)
    app.config["NAMESRV"] = cfg
    app.json.sort_keys = True  # type: ignore[attr-defined]
    # KV keys are arbitrary strings: slashes and control characters (a newline) included, which
    # werkzeug's path converter does not match; the handlers validate what they get.
    app.url_map.converters["anything"] = AnythingConverter
    app.config["MAX_CONTENT_LENGTH"] = 1024 * 1024
    m = ServerMetrics()
    # the host's cut file; its first refresh (`lifecycle.start`) builds it here if no builder runs
    snapshots = serving_store(cfg, metrics=SnapshotMetrics(m.registry), max_staleness_ms=cfg.max_staleness_ms)
    lag = LagProbe(cfg.bootstrap, cfg.kafka_topic)  # connects on the first scrape
    m.registry.register(ServedCutCollector(snapshots, lag))
    publisher = ReconnectingPublisher(  # connects on the first write
        lambda: EventPublisher(cfg.bootstrap, cfg.kafka_topic, max_message_bytes=cfg.max_message_bytes,
                               journal=AdminJournal(cfg.warehouse)))
    # the served cuts' risk reports: a thread of its own, started once the store serves a cut
    risk_service = risks.RiskService(snapshots, on_report=metrics.risk_gauges(m))
    snapshots.add_listener(risk_service.on_refresh)
    lifecycle.init_app(app, snapshots, closing=(publisher, lag, risk_service))
    app.extensions[metrics.EXTENSION] = m
    app.extensions[risks.EXTENSION] = risk_service
    app.extensions[writes.TOKEN] = admin_token(cfg)
    app.extensions[writes.PUBLISHER] = publisher
    errors.register(app)
    app.before_request(metrics.name_endpoint)
    app.after_request(stamp_snapshot)
    for bp in (routes.bp, cluster.bp, kv.bp, admin.bp, history.bp, health.bp, openapi.bp, metrics.bp, dashboard.bp,
               risks.bp):
        app.register_blueprint(bp)
    app.wsgi_app = metrics.Instrumented(RouteBodies(app.wsgi_app, snapshots), m)  # type: ignore[method-assign]
    return app
