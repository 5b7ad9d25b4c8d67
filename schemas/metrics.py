"""Every Prometheus metric the system exposes, defined once: names, help, labels, buckets.

Three processes count: the streaming job, the remoting front and the HTTP server. One scrape
target serves them all (`GET /metrics` of the HTTP server): the job and the front write their
registries to `<data dir>/metrics/<role>.prom` (`job`, `remoting-<port>`; atomically, in Prometheus' text format, as
node_exporter's textfile collector reads them), and the server appends those files to its own
exposition. The job runs on Spark's driver, possibly on another host than the server's, and the
front is an event loop that should not serve HTTP; a file in the data directory both already
share costs neither a port nor a dependency between processes.

Label values are bounded: request codes RocketMQ defines (others count as `other`), Flask's URL
rules (never raw paths), change kinds the route manager writes, dead-letter reason classes.
"""

from __future__ import annotations

import os
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.exposition import generate_latest

# `*_created` series double every counter's lines and no dashboard here uses them.
disable_created_metrics()

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
RECORD_BUCKETS = (0, 1, 10, 100, 1000, 5000, 20000, 100000)

# Dead letters by class: the first words of parse_event's reasons (schemas.events, schemas.fields).
_REASON_CLASSES = (
    ("encoding", ("empty record value", "value is not UTF-8", "value is not JSON", "value must be a JSON object")),
    ("size", ("record of ",)),
    ("clock_skew", ("timestamp ",)),
    ("key", ("Kafka key ",)),
    ("type", ("unknown event type", "missing required field 'type'")),
    ("retention", ("lost to the events topic's retention",)),
)


def reason_class(reason: str) -> str:
    """The bounded class of a dead-letter reason: encoding, size, clock_skew, key, type, retention or field."""
    for name, prefixes in _REASON_CLASSES:
        if reason.startswith(prefixes):
            return name
    return "field"


class JobMetrics:
    """The streaming job's counters, updated by the sink after every batch."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.batches = Counter("namesrv_job_batches", "Micro-batches committed", registry=r)
        self.batch_seconds = Histogram("namesrv_job_batch_duration_seconds",
                                       "Sink time of a micro-batch (Delta commits and progress record)",
                                       buckets=BATCH_BUCKETS, registry=r)
        self.batch_records = Histogram("namesrv_job_batch_records", "Kafka records read per micro-batch",
                                       buckets=RECORD_BUCKETS, registry=r)
        self.records = Counter("namesrv_job_records", "Kafka records read", registry=r)
        self.changes = Counter("namesrv_job_route_changes",
                               "Route and KV changes by kind (BROKER_REGISTERED, BROKER_EXPIRED, "
                               "BROKER_UNREGISTERED, REGISTRATION_REJECTED, ...)", ["kind"], registry=r)
        self.rejections = Counter("namesrv_job_rejections", "Registrations refused, by kind",
                                  ["kind"], registry=r)
        self.dead_letters = Counter("namesrv_job_dead_letters", "Records quarantined in dead_letter, by reason class",
                                    ["reason_class"], registry=r)
        self.events_lost = Counter("namesrv_job_events_lost",
                                   "Events the topic's retention removed before the job read them (a job down longer "
                                   "than the retention), by partition", ["partition"], registry=r)
        self.snapshots = Counter("namesrv_job_snapshots_committed", "Consistent cuts committed", registry=r)
        self.maintenance = Counter("namesrv_job_maintenance_runs", "Table maintenance runs", registry=r)
        self.maintenance_seconds = Histogram("namesrv_job_maintenance_duration_seconds", "Table maintenance time",
                                             buckets=BATCH_BUCKETS, registry=r)
        self.last_batch = Gauge("namesrv_job_last_batch_timestamp_seconds", "When the last batch was committed",
                                registry=r)
        self.last_snapshot = Gauge("namesrv_job_last_snapshot_id", "Newest cut the job committed", registry=r)
        self.driver_heap = Gauge("namesrv_job_driver_heap_bytes",
                                 "The driver's heap (kind=heap), the route state its query holds (kind=state, the "
                                 "state operators' memoryUsedBytes) and the heap the sizing asks for that state "
                                 "(kind=needed): needed above heap means the next start needs a bigger one",
                                 ["kind"], registry=r)
        self.task_slots = Gauge("namesrv_job_task_slots",
                                "Task slots of the driver's local master: tasks its JVM runs at once, each with a "
                                "Python worker (NAMESRV_SPARK_MASTER=auto: one per task of the stateful stage)",
                                registry=r)



# Flask endpoints are bounded by the app's URL map; the fast path is named like its rule.
FAST_PATH_ENDPOINT = "routes.topic_route"


class ServerMetrics:
    """The HTTP server's request counters; snapshot and lag figures are collected at scrape time."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("namesrv_http_requests", "HTTP requests by endpoint, method and status code",
                                ["endpoint", "method", "code"], registry=r)
        self.latency = Histogram("namesrv_http_request_duration_seconds", "HTTP request time by endpoint",
                                 ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        # one series per risk kind (routeinfo.risks.KINDS: six, each with its one severity), set from
        # each served cut's report (serving.risks); absent until the first report
        self.risks = Gauge("namesrv_risks", "Risks in the served cut's topology by kind, with the kind's severity "
                           "(GET /risks; set once per served cut)", ["kind", "severity"], registry=r)


class RemotingMetrics:
    """The remoting front's counters (RocketMQ request codes as labels, bounded)."""

    def __init__(self, known_codes: frozenset[int]) -> None:
        self.known = known_codes
        self._answered: dict[tuple[int, int], tuple[Counter, Histogram]] = {}  # (code or -1, reply code) -> children
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("namesrv_remoting_requests", "Remoting requests by request code and response code",
                                ["request_code", "response_code"], registry=r)
        self.latency = Histogram("namesrv_remoting_request_duration_seconds",
                                 "Remoting request time (receipt to answer written) by request code",
                                 ["request_code"], buckets=LATENCY_BUCKETS, registry=r)
        self.connections = Gauge("namesrv_remoting_connections", "Open remoting connections", registry=r)
        self.connections_opened = Counter("namesrv_remoting_connections_opened", "Remoting connections accepted",
                                          registry=r)
        self.refused = Counter("namesrv_remoting_refused", "Requests refused (network or signature)",
                               ["request_code"], registry=r)
        self.snapshot_id = Gauge("namesrv_remoting_snapshot_id", "Id of the cut the front serves (-1: none yet)",
                                 registry=r)
        self.heartbeats_forwarded = Counter("namesrv_remoting_heartbeats_forwarded",
                                            "Coalesced heartbeats published to Kafka", registry=r)
        self.repeats_published_small = Counter(
            "namesrv_remoting_repeats_published_small",
            "Unchanged re-registrations published as a small event naming the registration they repeat",
            registry=r)

    def code_label(self, code: int) -> str:
        return str(code) if code in self.known else "other"

    def answered(self, code: int, reply_code: int, seconds: float) -> None:
        """One answer counted and timed. The labelled children are looked up once per pair of
        codes: a lookup per request was a tenth of a route lookup's CPU. Keyed by the label, not
        the raw code, so a client sending arbitrary codes cannot grow the cache."""
        key = (code if code in self.known else -1, reply_code)
        children = self._answered.get(key)
        if children is None:
            label = self.code_label(code)
            children = self._answered[key] = (self.requests.labels(label, str(reply_code)), self.latency.labels(label))
        children[0].inc()
        children[1].observe(seconds)


class SnapshotMetrics:
    """How a process's SnapshotStore refreshes: `namesrv_snapshot_*` for the HTTP server,
    `namesrv_remoting_snapshot_*` for the front (one exposition cannot hold a family twice)."""

    def __init__(self, registry: CollectorRegistry, prefix: str = "namesrv_snapshot") -> None:
        self.refresh_seconds = Histogram(f"{prefix}_refresh_duration_seconds",
                                         "Time to look for and load a newer cut", buckets=LATENCY_BUCKETS,
                                         registry=registry)
        self.refresh_failures = Counter(f"{prefix}_refresh_failures", "Refreshes that failed (the last good "
                                        "cut is still served)", registry=registry)
        self.swaps = Counter(f"{prefix}_swaps", "Newer cuts swapped in", registry=registry)
        self.builder_failures = Gauge(f"{prefix}_builder_failures",
                                      "Failures in a row of the host's cut builder, from its status file "
                                      "(cuts/builder.json); 0 once it writes a cut again", registry=registry)

    def observe(self, seconds: float, *, ok: bool, swapped: bool) -> None:
        self.refresh_seconds.observe(seconds)
        if not ok:
            self.refresh_failures.inc()
        if swapped:
            self.swaps.inc()


def metrics_file(data_dir: Path, role: str) -> Path:
    return Path(data_dir) / "metrics" / f"{role}.prom"


def write_metrics_file(data_dir: Path, role: str, registry: CollectorRegistry) -> None:
    """Atomically replace `<data dir>/metrics/<role>.prom` with the registry's exposition."""
    path = metrics_file(data_dir, role)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp.{os.getpid()}")
    tmp.write_bytes(generate_latest(registry))
    os.replace(tmp, path)


def remoting_role(remoting_port: int) -> str:
    """The metrics file of the front on this port: one per replica, each read by the HTTP server of
    the same replica (an exposition cannot hold the same family twice)."""
    return f"remoting-{remoting_port}"


def read_metrics_files(data_dir: Path, remoting_port: int) -> bytes:
    """The job's and this replica's front's expositions, concatenated (absent files: nothing)."""
    out = []
    for role in ("job", remoting_role(remoting_port)):
        try:
            out.append(metrics_file(data_dir, role).read_bytes())
        except FileNotFoundError:
            continue
    return b"".join(out)
