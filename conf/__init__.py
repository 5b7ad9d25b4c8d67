"""Configuration: `conf/defaults.toml`, overridden by `NAMESRV_*` environment variables.

Read once, at each entry point (job, server, simulator, run.sh helpers), and passed down
as a frozen `Config`; nothing else in the code base looks at the environment.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

DEFAULTS_FILE = Path(__file__).with_name("defaults.toml")

# Config field -> (toml section, toml key, environment variable)
_SOURCES: dict[str, tuple[str, str, str]] = {
    "data_dir": ("paths", "data_dir", "NAMESRV_DATA_DIR"),
    "kafka_bootstrap": ("kafka", "bootstrap", "NAMESRV_KAFKA_BOOTSTRAP"),
    "kafka_embedded_port": ("kafka", "embedded_port", "NAMESRV_KAFKA_EMBEDDED_PORT"),
    "kafka_topic": ("kafka", "topic", "NAMESRV_KAFKA_TOPIC"),
    "kafka_partitions": ("kafka", "partitions", "NAMESRV_KAFKA_PARTITIONS"),
    "max_records_per_batch": ("kafka", "max_records_per_batch", "NAMESRV_MAX_RECORDS_PER_BATCH"),
    "max_message_bytes": ("kafka", "max_message_bytes", "NAMESRV_MAX_MESSAGE_BYTES"),
    "spark_master": ("job", "spark_master", "NAMESRV_SPARK_MASTER"),
    "shuffle_partitions": ("job", "shuffle_partitions", "NAMESRV_SHUFFLE_PARTITIONS"),
    "state_store": ("job", "state_store", "NAMESRV_STATE_STORE"),
    "trigger_interval_ms": ("job", "trigger_interval_ms", "NAMESRV_TRIGGER_INTERVAL_MS"),
    "broker_timeout_ms": ("job", "broker_timeout_ms", "NAMESRV_BROKER_TIMEOUT_MS"),
    "max_clock_skew_ms": ("job", "max_clock_skew_ms", "NAMESRV_MAX_CLOCK_SKEW_MS"),
    "live_flush_ms": ("job", "live_flush_ms", "NAMESRV_LIVE_FLUSH_MS"),
    "heartbeat_defer_ms": ("job", "heartbeat_defer_ms", "NAMESRV_HEARTBEAT_DEFER_MS"),
    "maintenance_interval_ms": ("job", "maintenance_interval_ms", "NAMESRV_MAINTENANCE_INTERVAL_MS"),
    "history_retention_ms": ("job", "history_retention_ms", "NAMESRV_HISTORY_RETENTION_MS"),
    "delete_topic_with_broker_registration": ("job", "delete_topic_with_broker_registration",
                                              "NAMESRV_DELETE_TOPIC_WITH_BROKER_REGISTRATION"),
    "http_host": ("http", "host", "NAMESRV_HTTP_HOST"),
    "http_port": ("http", "port", "NAMESRV_HTTP_PORT"),
    "http_threads": ("http", "threads", "NAMESRV_HTTP_THREADS"),
    "refresh_interval_ms": ("http", "refresh_interval_ms", "NAMESRV_REFRESH_INTERVAL_MS"),
    "write_timeout_ms": ("http", "write_timeout_ms", "NAMESRV_WRITE_TIMEOUT_MS"),
    "admin_token": ("http", "admin_token", "NAMESRV_ADMIN_TOKEN"),
}


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the variable."""


@dataclass(frozen=True)
class Config:
    data_dir: Path
    kafka_bootstrap: str
    kafka_embedded_port: int
    kafka_topic: str
    kafka_partitions: int
    max_records_per_batch: int
    max_message_bytes: int
    spark_master: str
    shuffle_partitions: int
    state_store: str
    trigger_interval_ms: int
    broker_timeout_ms: int
    max_clock_skew_ms: int
    live_flush_ms: int
    heartbeat_defer_ms: int
    maintenance_interval_ms: int
    history_retention_ms: int
    delete_topic_with_broker_registration: bool
    http_host: str
    http_port: int
    http_threads: int
    refresh_interval_ms: int
    write_timeout_ms: int
    admin_token: str = field(repr=False)  # never printed

    @property
    def bootstrap(self) -> str:
        """The Kafka bootstrap address actually used: the configured one, else the embedded broker."""
        return self.kafka_bootstrap or f"127.0.0.1:{self.kafka_embedded_port}"

    @property
    def uses_embedded_kafka(self) -> bool:
        return not self.kafka_bootstrap

    @property
    def warehouse(self) -> Path:
        return self.data_dir / "delta"

    @property
    def checkpoint_dir(self) -> Path:
        return self.data_dir / "checkpoint"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def admin_token_file(self) -> Path:
        return self.data_dir / "admin-token"


# Producer requests (32 MiB) and source fetches (64 MiB) are sized above every accepted record,
# so an oversize record still arrives and is dead-lettered with its reason, never lost.
MAX_MESSAGE_BYTES_CEILING = 16 * 1024 * 1024

# Spark state store providers by their NAMESRV_STATE_STORE name.
STATE_STORES = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}


def load_config(environ: Mapping[str, str] | None = None, defaults_file: Path = DEFAULTS_FILE) -> Config:
    """Merge the defaults file with `NAMESRV_*` variables from `environ` (default: os.environ)."""
    env = os.environ if environ is None else environ
    with open(defaults_file, "rb") as fh:
        toml = tomllib.load(fh)
    values: dict[str, object] = {}
    for name, (section, key, var) in _SOURCES.items():
        default = toml[section][key]
        raw = env.get(var)
        if raw is None or raw == "" and not isinstance(default, str):
            value: object = default
        elif isinstance(default, bool):
            if raw.strip().lower() not in ("true", "false"):
                raise ConfigError(f"{var}={raw!r} must be true or false")
            value = raw.strip().lower() == "true"
        elif isinstance(default, int):
            try:
                value = int(raw)
            except ValueError:
                raise ConfigError(f"{var}={raw!r} is not an integer") from None
            if value < 0:
                raise ConfigError(f"{var}={raw!r} must not be negative")
        else:
            value = raw
        values[name] = value
    values["data_dir"] = Path(str(values["data_dir"])).resolve()
    for name in ("kafka_partitions", "max_records_per_batch", "shuffle_partitions", "trigger_interval_ms",
                 "broker_timeout_ms", "http_threads", "refresh_interval_ms", "max_message_bytes",
                 "write_timeout_ms", "maintenance_interval_ms", "history_retention_ms"):
        if int(values[name]) <= 0:  # type: ignore[arg-type]
            raise ConfigError(f"{_SOURCES[name][2]} must be positive")
    if values["state_store"] not in STATE_STORES:
        raise ConfigError(f"NAMESRV_STATE_STORE={values['state_store']!r} must be one of {', '.join(STATE_STORES)}")
    if int(values["max_message_bytes"]) > MAX_MESSAGE_BYTES_CEILING:  # type: ignore[arg-type]
        raise ConfigError(f"NAMESRV_MAX_MESSAGE_BYTES must be at most {MAX_MESSAGE_BYTES_CEILING} "
                          "(the producer's request and the source's fetch are sized above it)")
    return Config(**values)  # type: ignore[arg-type]
