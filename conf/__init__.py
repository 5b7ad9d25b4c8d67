"""Configuration: every setting declared once, here, as a field of `Config`.

A field's default, its environment variable, its meaning and its checks are written in one
place (`setting(...)`); `load_config` reads the variables at each entry point (launcher, job,
server, simulator, benchmarks) and passes a frozen `Config` down; nothing else in the code base
looks at the environment. The configuration page's table (docs/configuration.md) is generated from the same fields
(`settings_table`), and a test keeps the two in step.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conf.store import StorePath, check_location, is_uri, store_path

# Producer requests (32 MiB) and source fetches (64 MiB) are sized above every accepted record,
# so an oversize record still arrives and is dead-lettered with its reason, never lost.
MAX_MESSAGE_BYTES_CEILING = 16 * 1024 * 1024

# Spark state store providers by their NAMESRV_STATE_STORE name.
STATE_STORES = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the variable."""


def setting(env: str, default: Any, doc: str, *, positive: bool = False, maximum: int | None = None,
            choices: tuple[str, ...] | None = None, pattern: tuple[str, str] | None = None, secret: bool = False,
            shown: str | None = None) -> Any:
    """A `Config` field with its environment variable and its checks.

    `positive`: must be > 0 (else >= 0 for numbers); `maximum`: upper bound; `choices`: allowed
    strings; `pattern`: (regular expression a string must match, what that is in words);
    `secret`: never printed; `shown`: how docs/configuration.md writes the default.
    """
    return dataclasses.field(default=default, repr=not secret, metadata={
        "env": env, "doc": doc, "positive": positive, "maximum": maximum, "choices": choices, "pattern": pattern,
        "secret": secret, "shown": shown})


@dataclass(frozen=True)
class Config:
    data_dir: Path = setting("NAMESRV_DATA_DIR", Path("data"),
                             "this host's directory: logs (`logs/`), metrics files, the admin token; also the "
                             "Delta warehouse (`delta/`), Spark checkpoint (`checkpoint/`) and the writer's leases "
                             "(`leases/`) while NAMESRV_STORE_URI is empty")
    store_uri: str = setting(
        "NAMESRV_STORE_URI", "",
        "where the Delta warehouse (`delta/`), Spark checkpoint (`checkpoint/`) and the writer's leases (`leases/`) "
        "live: empty = NAMESRV_DATA_DIR; `hdfs://namenode:port/path` when the job, its standby and the serving "
        "replicas run on several hosts (docs/deploy.md)", shown="NAMESRV_DATA_DIR")
    kafka_bootstrap: str = setting("NAMESRV_KAFKA_BOOTSTRAP", "",
                                   "external Kafka bootstrap; empty = start the embedded broker (NAMESRV_KAFKA_EMBEDDED)")
    kafka_embedded: str = setting(
        "NAMESRV_KAFKA_EMBEDDED", "kafka",
        "which embedded broker `./run.sh` starts: `kafka` (Apache Kafka, one KRaft node, its log in "
        "`<data dir>/kafka`; applies the topic's retention) or `tansu` (Tansu on its memory engine: starts at once, "
        "but keeps every event until it stops, so its memory grows with the fleet's traffic; tests and short demos)",
        choices=("kafka", "tansu"))
    kafka_embedded_port: int = setting("NAMESRV_KAFKA_EMBEDDED_PORT", 19092,
                                       "port of the embedded broker on 127.0.0.1", maximum=65535)
    kafka_fetch_wait_ms: int = setting(
        "NAMESRV_KAFKA_FETCH_WAIT_MS", 0,
        "how long the job's look for new records waits at the broker per fetch. Apache Kafka answers a waiting fetch as "
        "soon as a record arrives, so a long wait costs no latency and keeps an idle job's fetches rare; Tansu answers "
        "only when the wait ends, so there it adds up to this much to a change's latency. 0 = 100 ms with the embedded "
        "Tansu, 2500 ms otherwise; set 100 for an external Tansu", maximum=5000)
    kafka_topic: str = setting("NAMESRV_KAFKA_TOPIC", "namesrv-events", "events topic (created if missing)")
    kafka_partitions: int = setting("NAMESRV_KAFKA_PARTITIONS", 2, "partitions when the topic is created",
                                    positive=True)
    # The log keeps what recovery needs: the events after the job's last committed batch (seconds
    # behind it while it runs). A day lets the job be down overnight; the bytes bound a large fleet
    # first (docs/operations.md, "The event log's retention").
    kafka_retention_ms: int = setting(
        "NAMESRV_KAFKA_RETENTION_MS", 86400000,
        "`retention.ms` of the events topic, set when the topic is created: events older than this are removed "
        "whether the job read them or not (a job down longer loses them, and says which: docs/operations.md)",
        positive=True)
    kafka_retention_bytes: int = setting(
        "NAMESRV_KAFKA_RETENTION_BYTES", 1073741824,
        "`retention.bytes` of the events topic (per partition), set when the topic is created: the oldest "
        "segments go once a partition holds more", positive=True)
    kafka_segment_bytes: int = setting(
        "NAMESRV_KAFKA_SEGMENT_BYTES", 67108864,
        "`segment.bytes` of the events topic, set when the topic is created: retention removes whole segments, so "
        "a partition holds up to NAMESRV_KAFKA_RETENTION_BYTES plus one segment", positive=True)
    max_records_per_batch: int = setting(
        "NAMESRV_MAX_RECORDS_PER_BATCH", 5000,
        "bound on records per micro-batch (a wave of 10,000 registrations of 100 topics in 20,000-record "
        "batches ran the 1 GiB JVM heap out)", positive=True)
    max_message_bytes: int = setting(
        "NAMESRV_MAX_MESSAGE_BYTES", 1048576,
        "per record, at most 16 MiB: larger records go to `dead_letter`; publishers chunk larger registrations",
        positive=True, maximum=MAX_MESSAGE_BYTES_CEILING)
    spark_master: str = setting(
        "NAMESRV_SPARK_MASTER", "auto",
        "Spark master URL: `auto` runs the job in `local[N]`, one task slot (each with its Python worker) per task "
        "of the stateful stage (NAMESRV_SHUFFLE_PARTITIONS), at most the host's cores (docs/scaling.md); `local[1]` "
        "saves a worker's memory at a quarter of a second more per change served; `spark://host:7077` for a "
        "standalone cluster")
    spark_driver_memory: str = setting(
        "NAMESRV_SPARK_DRIVER_MEMORY", "auto",
        "heap of Spark's driver JVM (`spark.driver.memory`; in local mode it also holds the tasks and the HDFS-backed "
        "state): `auto` sizes it at each start to the fleet the warehouse's newest cut holds (docs/scaling.md); a "
        "JVM size such as 3g fixes it. The collector follows it: serial up to 1g, G1 past it",
        pattern=(r"auto|[1-9][0-9]*[kmgtKMGT]?", "`auto` or a JVM memory size such as 1g or 3072m"))
    shuffle_partitions: int = setting("NAMESRV_SHUFFLE_PARTITIONS", 2,
                                      "`spark.sql.shuffle.partitions` (size to the cores)", positive=True)
    state_store: str = setting(
        "NAMESRV_STATE_STORE", "hdfs",
        "Spark state store: `hdfs` (in-memory maps) or `rocksdb`; fixed by the checkpoint once the job ran",
        choices=tuple(STATE_STORES))
    state_buckets: int = setting(
        "NAMESRV_STATE_BUCKETS", 32,
        "keys of the job's stateful operator that broker groups share (a batch costs at most this many Python "
        "calls, whatever the fleet); fixed by the checkpoint: a changed value is migrated at start",
        positive=True, maximum=4096)
    trigger_interval_ms: int = setting(
        "NAMESRV_TRIGGER_INTERVAL_MS", 500,
        "the pace of batches no change asks for (deferred heartbeats, timeouts) and the longest a look for records "
        "waits (at most 10 s); a change runs a batch at once, right after any batch in flight (see Architecture). "
        "With NAMESRV_KAFKA_SOURCE=connector: Spark's trigger interval",
        positive=True)
    roles: str = setting(
        "NAMESRV_ROLES", "all",
        "what `./run.sh` starts and supervises on this host: `all` (one machine: the embedded Kafka broker unless "
        "NAMESRV_KAFKA_BOOTSTRAP is set, the job, the serving replicas), `job` (a driver host: the job, and its "
        "standby with NAMESRV_JOB_STANDBY) or `serving` (a serving host: NAMESRV_REPLICAS × HTTP + remoting front); "
        "`job` and `serving` need NAMESRV_KAFKA_BOOTSTRAP (docs/deploy.md)", choices=("all", "job", "serving"))
    job_standby: bool = setting(
        "NAMESRV_JOB_STANDBY", False,
        "`./run.sh` also starts a standby job: its SparkSession is up and its Python workers warm; it takes over the "
        "writer's lease the moment the active job dies, or after 5 s without renewal (paused or cut off), and fences "
        "the old writer's commits (costs a second idle driver; see docs/reliability.md, One writer)")
    # 25 s, under one of RocketMQ's heartbeat periods (30 s): a quiet fleet costs one batch per
    # window, and a signal is applied (and, NAMESRV_LIVE_FLUSH_MS being 0, in broker_live) within
    # the window plus a batch, so the served lastUpdateTimestamp stays within one heartbeat interval
    # of the newest signal (docs/semantics.md §15.3; the bench's fleet part measures it). Expiry does
    # not wait for it: a due group timeout admits a batch, which reads every waiting signal first.
    # Measured before buckets: 60 s halved idle CPU against 30 s (8.6 against 14.2 % of a core),
    # because each batch cost a call per group; with buckets a batch costs about a second of the
    # JVM's CPU (docs/scaling.md).
    heartbeat_defer_ms: int = setting("NAMESRV_HEARTBEAT_DEFER_MS", 25000,
                                      "liveness signals alone (heartbeats, unchanged re-registrations) wait up to this long "
                                      "for a batch (0 = a batch every trigger)")
    broker_timeout_ms: int = setting("NAMESRV_BROKER_TIMEOUT_MS", 120000,
                                     "default `heartbeatTimeoutMillis` of a broker that sends none", positive=True)
    max_clock_skew_ms: int = setting("NAMESRV_MAX_CLOCK_SKEW_MS", 300000,
                                     "allowed distance of an event `timestamp` from its Kafka record time")
    http_host: str = setting("NAMESRV_HTTP_HOST", "127.0.0.1", "HTTP listen address")
    http_port: int = setting("NAMESRV_HTTP_PORT", 9877,
                             "HTTP listen port (RocketMQ's remoting port is 9876; 0 = any free port, tests)",
                             maximum=65535)
    http_threads: int = setting("NAMESRV_HTTP_THREADS", 8,
                                "threads answering the requests the HTTP server's event loop hands to the Flask app "
                                "(route lookups and watch streams are answered in the loop)", positive=True)
    replicas: int = setting(
        "NAMESRV_REPLICAS", 1,
        "serving replicas `./run.sh` starts over the one warehouse: replica i is an HTTP server on "
        "NAMESRV_HTTP_PORT+i and a remoting front on NAMESRV_REMOTING_PORT+i", positive=True, maximum=16)
    remoting_host: str = setting("NAMESRV_REMOTING_HOST", "127.0.0.1",
                                 "listen address of the RocketMQ remoting front (TCP, RocketMQ's own protocol)")
    remoting_port: int = setting("NAMESRV_REMOTING_PORT", 9876,
                                 "remoting port brokers, clients and mqadmin use as `namesrvAddr` (0 = no remoting "
                                 "front)", maximum=65535)
    remoting_processes: int = setting(
        "NAMESRV_REMOTING_PROCESSES", 1,
        "remoting front processes sharing NAMESRV_REMOTING_PORT (SO_REUSEPORT; each maps the host's one cut file "
        "and holds its own connections)", positive=True, maximum=64)
    http_max_watchers: int = setting(
        "NAMESRV_HTTP_MAX_WATCHERS", 20000,
        "open watch streams (`/topics/<t>/route/watch`, `/cluster/watch`) one HTTP server holds; one more is "
        "answered 503", positive=True)
    remoting_access_key: str = setting(
        "NAMESRV_REMOTING_ACCESS_KEY", "",
        "ACL access key that remoting admin writes (and, when set, broker requests) must be signed with; empty = "
        "remoting admin writes refused")
    remoting_secret_key: str = setting("NAMESRV_REMOTING_SECRET_KEY", "",
                                       "the secret key of that pair (HmacSHA1, as RocketMQ's ACL client hook signs)",
                                       secret=True)
    remoting_broker_networks: str = setting(
        "NAMESRV_REMOTING_BROKER_NETWORKS", "127.0.0.0/8,::1/128",
        "CIDRs broker requests (register, unregister, heartbeat, data version) are accepted from")
    remoting_unsigned_brokers: bool = setting(
        "NAMESRV_REMOTING_UNSIGNED_BROKERS", False,
        "with a key pair set, still accept broker requests that carry no signature at all from "
        "NAMESRV_REMOTING_BROKER_NETWORKS: RocketMQ 4.9 brokers cannot sign their NameServer requests (a signed "
        "request is always checked)")
    remoting_idle_timeout_ms: int = setting("NAMESRV_REMOTING_IDLE_TIMEOUT_MS", 120000,
                                            "a remoting connection silent this long is closed", positive=True)
    remoting_write_wait_ms: int = setting(
        "NAMESRV_REMOTING_WRITE_WAIT_MS", 3000,
        "how long a remoting write (or a registration that changes what a lookup sees) waits to be served before it is answered "
        "(under mqadmin's 5 s timeout)")
    remoting_heartbeat_coalesce_ms: int = setting(
        "NAMESRV_REMOTING_HEARTBEAT_COALESCE_MS", 1000,
        "heartbeats of one broker are forwarded at most once per window (the newest, with its receive time)",
        positive=True)
    remoting_socket_rcvbuf: int = setting(
        "NAMESRV_REMOTING_SOCKET_RCVBUF", 16384,
        "bytes of a remoting connection's unread requests the kernel holds, at most (SO_RCVBUF: the kernel doubles it "
        "for its bookkeeping, caps it at net.core.rmem_max); a front behind its fleet stops reading the connections "
        "that send much, and this bounds what each holds of the host's TCP memory meanwhile (docs/performance.md). "
        "0 = the kernel's autotuning, as RocketMQ's NameServer, which never stops reading; else at least 4096",
        maximum=16 * 1024 * 1024)
    refresh_interval_ms: int = setting("NAMESRV_REFRESH_INTERVAL_MS", 200,
                                       "how often the server reads the job's progress record for a newer snapshot. On a "
                                       "local warehouse the kernel wakes it as soon as the job or the cut builder rewrites "
                                       "its file, and this is a safety net of at least 1 s; on HDFS it also looks at that "
                                       "file's identity every 20 ms (every 100 ms once it has not changed for 30 s) and "
                                       "reloads as soon as it changes",
                                       positive=True)
    max_staleness_ms: int = setting(
        "NAMESRV_MAX_STALENESS_MS", 30000,
        "a serving replica that has not read the store for this long (cut off from it) reports not ready on "
        "/readyz; it keeps answering lookups from its last cut, and every HTTP answer says how stale in "
        "X-Namesrv-Staleness-Ms", positive=True)
    write_timeout_ms: int = setting("NAMESRV_WRITE_TIMEOUT_MS", 30000,
                                    "how long a write waits to be materialized before answering 504", positive=True)
    admin_token: str = setting("NAMESRV_ADMIN_TOKEN", "",
                               "bearer token for writes; empty = the token file `<data dir>/admin-token`",
                               secret=True)
    live_flush_ms: int = setting("NAMESRV_LIVE_FLUSH_MS", 0,
                                 "liveness signals reach `broker_live` once per window (0 = in the batch that "
                                 "applies them; a window adds up to its length to the table's lag)")
    log_format: str = setting("NAMESRV_LOG_FORMAT", "text",
                              "`text`, or `json` (one JSON object per line in every log, with batch id, snapshot id "
                              "and broker names as fields)", choices=("text", "json"))
    log_max_bytes: int = setting("NAMESRV_LOG_MAX_BYTES", 10485760,
                                 "a log the launcher writes is rotated when it would grow past this size",
                                 positive=True)
    log_backups: int = setting("NAMESRV_LOG_BACKUPS", 5, "rotated files kept per log (`job.log.1` ... `.N`)")
    maintenance_interval_ms: int = setting("NAMESRV_MAINTENANCE_INTERVAL_MS", 3600000, "table maintenance period",
                                           positive=True)
    history_retention_ms: int = setting("NAMESRV_HISTORY_RETENTION_MS", 604800000,
                                        "time-travel window (7 days) kept by log cleanup and vacuum", positive=True)
    delete_topic_with_broker_registration: bool = setting(
        "NAMESRV_DELETE_TOPIC_WITH_BROKER_REGISTRATION", False,
        "RocketMQ 5.1.4's switch: a registration drops the broker's topics it no longer lists")
    kafka_source: str = setting(
        "NAMESRV_KAFKA_SOURCE", "python",
        "how the job reads the events topic: `python` (our source, with batch admission) or `connector` "
        "(Spark's `format(\"kafka\")`); see Performance", choices=("python", "connector"))
    maven_repository: str = setting(
        "NAMESRV_MAVEN_REPOSITORY", "",
        "Maven repository for the one-time resolution of the JVM dependencies (`jvm/`); empty = Maven's own "
        "configuration. Not used once resolved")
    test_kill_probability: float = setting(
        "NAMESRV_TEST_KILL_PROBABILITY", 0.0,
        "crash-safety tests only: chance of a SIGKILL of the job at each sink commit point (0 = never)",
        maximum=1)

    @property
    def bootstrap(self) -> str:
        """The Kafka bootstrap address actually used: the configured one, else the embedded broker."""
        return self.kafka_bootstrap or f"127.0.0.1:{self.kafka_embedded_port}"

    @property
    def fetch_wait_ms(self) -> int:
        """NAMESRV_KAFKA_FETCH_WAIT_MS, or what suits the broker when it is 0."""
        if self.kafka_fetch_wait_ms:
            return self.kafka_fetch_wait_ms
        return 100 if not self.kafka_bootstrap and self.kafka_embedded == "tansu" else 2500

    @property
    def read_only_facts(self) -> dict[str, bool | int]:
        """NameServer settings shown (not changed) by GET /config and GET_NAMESRV_CONFIG (319)."""
        return {"deleteTopicWithBrokerRegistration": self.delete_topic_with_broker_registration,
                "defaultHeartbeatTimeoutMillis": self.broker_timeout_ms}

    def replica(self, i: int) -> Config:
        """Replica i's configuration: its ports shifted by i, everything else shared."""
        return dataclasses.replace(self, http_port=self.http_port + i,
                                   remoting_port=self.remoting_port + i if self.remoting_port else 0)

    @property
    def uses_embedded_kafka(self) -> bool:
        return not self.kafka_bootstrap

    @property
    def store_root(self) -> StorePath:
        """The shared state's root: NAMESRV_STORE_URI, or the data directory."""
        return store_path(self.store_uri) if self.store_uri else self.data_dir

    @property
    def warehouse(self) -> StorePath:
        return self.store_root / "delta"

    @property
    def checkpoint_dir(self) -> StorePath:
        return self.store_root / "checkpoint"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def admin_token_file(self) -> Path:
        return self.data_dir / "admin-token"


SETTINGS: tuple[dataclasses.Field[Any], ...] = dataclasses.fields(Config)


def load_config(environ: Mapping[str, str] | None = None) -> Config:
    """The defaults, overridden by `NAMESRV_*` variables from `environ` (default: os.environ)."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for f in SETTINGS:
        raw = env.get(f.metadata["env"])
        values[f.name] = f.default if raw is None or (raw == "" and not isinstance(f.default, str)) \
            else _parse(f, raw)
    values["data_dir"] = Path(values["data_dir"]).resolve()
    if values["store_uri"]:
        reason = check_location(values["store_uri"])
        if reason is not None:
            raise ConfigError(f"NAMESRV_STORE_URI={values['store_uri']!r}: {reason}")
        if not is_uri(values["store_uri"]):
            values["store_uri"] = str(Path(values["store_uri"]).resolve())
    if values["roles"] != "all" and not values["kafka_bootstrap"]:
        raise ConfigError(f"NAMESRV_ROLES={values['roles']} needs NAMESRV_KAFKA_BOOTSTRAP: the hosts of a deployment "
                          "share one Kafka cluster (the embedded broker is for one machine)")
    return Config(**values)


def _parse(f: dataclasses.Field[Any], raw: str) -> Any:
    var, default, meta = f.metadata["env"], f.default, f.metadata
    if isinstance(default, bool):
        if raw.strip().lower() not in ("true", "false"):
            raise ConfigError(f"{var}={raw!r} must be true or false")
        return raw.strip().lower() == "true"
    if isinstance(default, (int, float)):
        try:
            value: int | float = type(default)(raw)
        except ValueError:
            raise ConfigError(f"{var}={raw!r} is not {'an integer' if isinstance(default, int) else 'a number'}") \
                from None
        if value < 0:
            raise ConfigError(f"{var}={raw!r} must not be negative")
        if meta["positive"] and value == 0:
            raise ConfigError(f"{var} must be positive")
        if meta["maximum"] is not None and value > meta["maximum"]:
            raise ConfigError(f"{var}={raw!r} must be at most {meta['maximum']}")
        return value
    if meta["choices"] is not None and raw not in meta["choices"]:
        raise ConfigError(f"{var}={raw!r} must be one of {', '.join(meta['choices'])}")
    if meta["pattern"] is not None and not re.fullmatch(meta["pattern"][0], raw):
        raise ConfigError(f"{var}={raw!r} must be {meta['pattern'][1]}")
    return Path(raw) if isinstance(default, Path) else raw


def _shown(f: dataclasses.Field[Any]) -> str:
    default = f.default
    if f.metadata["shown"]:
        return str(f.metadata["shown"])
    if default == "":
        return "*(empty)*"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    return f"`{default}`"


def settings_table() -> str:
    """docs/configuration.md's table (markdown), generated from the declarations."""
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    lines += [f"| `{f.metadata['env']}` | {_shown(f)} | {_linked(f.metadata['doc'])} |" for f in SETTINGS]
    return "\n".join(lines)


def _linked(doc: str) -> str:
    """A declaration's `docs/<page>.md` mentions as links on the page, which sits in docs/ (the
    declarations also serve `--print-config` and logs, where a path reads better than a link)."""
    return re.sub(r"(?<![\w/.\[-])(?<!\]\()docs/([\w-]+)\.md(?![\w/-])", r"[\1](\1.md)", doc)


def describe(cfg: Config) -> dict[str, str]:
    """The effective configuration by variable name, secrets masked (for logs and `--print-config`)."""
    return {f.metadata["env"]: "***" if f.metadata["secret"] and getattr(cfg, f.name) else str(getattr(cfg, f.name))
            for f in SETTINGS}
