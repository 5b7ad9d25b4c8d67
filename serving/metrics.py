"""`GET /metrics`: the HTTP server's Prometheus exposition, plus the job's and the remoting
front's (their files in the data directory; see schemas.metrics).

Requests are counted by a WSGI wrapper outside the route fast path, so lookups that never enter
Flask are counted and timed too; the Flask app names the endpoint (its URL rule) in the WSGI
environ, the fast path names its own. Figures that describe the served cut (snapshot id and age,
brokers, topics, consumer lag) are read at scrape time, never kept up to date in between.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from flask import Blueprint, Response, current_app, request
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from eventlog.lag import LagProbe
from routeinfo.risks import KINDS
from schemas.metrics import ServerMetrics, read_metrics_files
from serving.fastpath import ENDPOINT_KEY
from snapshots.store import SnapshotStore

log = logging.getLogger(__name__)
EXTENSION = "namesrv.metrics"
UNMATCHED = "unmatched"  # a path no rule matches (404): one label value, never the raw path

bp = Blueprint("metrics", __name__)


@bp.get("/metrics")
def metrics() -> Response:
    m: ServerMetrics = current_app.extensions[EXTENSION]
    cfg = current_app.config["NAMESRV"]
    body = generate_latest(m.registry) + read_metrics_files(cfg.data_dir, cfg.remoting_port)
    return Response(body, content_type=CONTENT_TYPE_LATEST)


def risk_gauges(m: ServerMetrics) -> Callable[[Mapping[str, int]], None]:
    """What sets `namesrv_risks` from a served cut's risk counts (serving.risks calls it per cut).
    The six series appear with the first report, so no zero is exposed before anything was known."""

    def update(counts: Mapping[str, int]) -> None:
        for k in KINDS:
            m.risks.labels(k.name, k.severity).set(counts.get(k.name, 0))
    return update


def name_endpoint() -> None:
    """before_request: the URL rule's endpoint, for the request counter."""
    request.environ[ENDPOINT_KEY] = request.endpoint or UNMATCHED


class Instrumented:
    """WSGI wrapper counting every request by endpoint, method and status, with its latency."""

    def __init__(self, app: Callable[..., Iterable[bytes]], m: ServerMetrics) -> None:
        self.app, self.m = app, m

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        started = time.perf_counter()
        status: list[str] = []

        def recording(code: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            status.append(code.split(" ", 1)[0])
            return start_response(code, headers, exc_info) if exc_info is not None else start_response(code, headers)

        try:
            return self.app(environ, recording)
        finally:
            endpoint = environ.get(ENDPOINT_KEY, UNMATCHED)
            method = environ.get("REQUEST_METHOD", "")
            method = method if method in ("GET", "PUT", "POST", "DELETE", "HEAD", "OPTIONS", "PATCH") else "other"
            self.m.requests.labels(endpoint, method, status[-1] if status else "500").inc()
            self.m.latency.labels(endpoint).observe(time.perf_counter() - started)


class ServedCutCollector:
    """Scrape-time gauges of the served cut and of how far it is behind the events topic."""

    def __init__(self, store: SnapshotStore, lag: LagProbe | None) -> None:
        self.store, self.lag = store, lag

    def describe(self) -> Iterator[Metric]:
        return iter(())  # collected at scrape time only

    def collect(self) -> Iterator[Metric]:
        snap = self.store.current
        yield _gauge("namesrv_snapshot_id", "Id of the served cut (-1: none yet)",
                     -1 if snap.snapshot_id is None else snap.snapshot_id)
        age = 0.0 if snap.commit_time is None else max(0.0, time.time() - snap.commit_time / 1000)
        yield _gauge("namesrv_snapshot_age_seconds", "Time since the served cut was committed", age)
        staleness = self.store.staleness_ms()
        yield _gauge("namesrv_snapshot_staleness_seconds",
                     "Time since this replica last read the store (grows while it is cut off from it; -1: never)",
                     -1 if staleness is None else staleness / 1000)
        yield _gauge("namesrv_brokers_live", "Live broker entries (brokerLive) in the served cut", len(snap.live))
        yield _gauge("namesrv_broker_groups", "Broker groups (brokerAddr) in the served cut", len(snap.brokers))
        yield _gauge("namesrv_clusters", "Clusters in the served cut", len(snap.clusters))
        yield _gauge("namesrv_topics", "Topics in the served cut", len(snap.topics))
        yield _gauge("namesrv_ready", "1 when the server takes traffic (see /readyz)",
                     1 if self.store.not_ready() is None else 0)
        if self.lag is None:
            return
        records = GaugeMetricFamily("namesrv_consumer_lag_records",
                                    "Events published and not yet served, per partition", labels=["partition"])
        seconds = GaugeMetricFamily("namesrv_consumer_lag_seconds",
                                    "Age of the oldest event not yet served, per partition (0: none waiting)",
                                    labels=["partition"])
        try:
            for p in self.lag.measure(self.store.served_offsets()):
                records.add_metric([str(p.partition)], p.records)
                seconds.add_metric([str(p.partition)], p.seconds)
            up = 1
        except Exception as exc:  # Kafka down: the scrape still answers, and says so
            log.warning("consumer lag not measured: %s: %s", type(exc).__name__, exc)
            up = 0
        yield _gauge("namesrv_kafka_up", "1 when the events topic answered the lag probe", up)
        yield records
        yield seconds


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc)
    g.add_metric([], value)
    return g
