"""Topic administration: the events topic is created on first use, with its retention, and waited for."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from conf import Config

log = logging.getLogger(__name__)

# The longest a segment stays open: time retention removes only closed segments, so an event
# stays at most this much longer than `retention.ms` (plus the broker's retention check).
MAX_SEGMENT_MS = 3_600_000


def retention_configs(cfg: Config) -> dict[str, str]:
    """The events topic's configuration (NAMESRV_KAFKA_RETENTION_MS, _RETENTION_BYTES,
    _SEGMENT_BYTES), as Apache Kafka names it: old events are deleted, never compacted (a
    compacted log would keep one registration per broker and drop the KV writes between)."""
    return {"cleanup.policy": "delete", "retention.ms": str(cfg.kafka_retention_ms),
            "retention.bytes": str(cfg.kafka_retention_bytes), "segment.bytes": str(cfg.kafka_segment_bytes),
            "segment.ms": str(min(cfg.kafka_retention_ms, MAX_SEGMENT_MS))}


def no_topic_creation(metadata: Any) -> None:
    """Make a client's metadata requests stop asking the broker to create the topics they name.

    The topic is created by `ensure_topic` only, with NAMESRV_KAFKA_PARTITIONS partitions: a topic a
    broker creates by itself gets its default count (Tansu 4, Apache Kafka's `num.partitions` 1), and
    the events of a broker or a KV namespace land on another partition than before. That happened
    when a broker lost its log: the job's consumer or a server's producer asked for the topic's
    metadata before `ensure_topic` ran. kafka-python 3.0.12 documents `allow_auto_create_topics`
    for both clients but never hands it to the `ClusterMetadata` that builds the requests (pinned
    in pyproject.toml), so it is set there.
    """
    metadata.config["allow_auto_create_topics"] = False


def ensure_topic(bootstrap: str, topic: str, partitions: int, configs: Mapping[str, str] | None = None,
                 wait_s: float = 60.0, copies: int | None = None) -> int:
    """Create `topic` if it does not exist, with `configs` (`retention_configs`); return its partition
    count. Waits for the broker. A topic that exists keeps its configuration: it may be an operator's
    to set (`kafka-configs.sh --alter`).

    `copies` None: as many copies as the cluster lists brokers, up to three. A broker's metadata can
    lag the cluster's for a moment after it forms (seen in CI: two of three listed), so a caller that
    knows the count passes it and the topic waits for that many brokers instead of taking fewer."""
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import KafkaError, TopicAlreadyExistsError
    deadline = time.monotonic() + wait_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
            try:
                if topic not in admin.list_topics():
                    # as many copies as the cluster has brokers, up to three (one broker: one copy);
                    # min.insync.replicas is the brokers' own setting (docs/deploy.md: 2 of 3)
                    # (asked of the cluster: the client's cached metadata may list fewer brokers)
                    listed = len(admin.describe_cluster()["brokers"])
                    if copies is not None and listed < copies:
                        last_error = RuntimeError(f"{listed} broker(s) listed, {copies} cop(ies) asked")
                        time.sleep(0.5)
                        continue
                    made = copies if copies is not None else max(1, min(3, listed))
                    try:
                        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=made,
                                                      topic_configs=dict(configs or {}))])
                        log.info("created topic %s: %d partition(s), %d cop%s, %s", topic, partitions, made,
                                 "y" if made == 1 else "ies", dict(configs or {}))
                    except TopicAlreadyExistsError:
                        pass
                described = admin.describe_topics([topic])
                count = len(described[0]["partitions"]) if described else 0
                if count:
                    return count
            finally:
                admin.close()
        except KafkaError as exc:  # broker not up yet
            last_error = exc
        time.sleep(0.5)
    raise RuntimeError(f"Kafka topic {topic!r} at {bootstrap} not available after {wait_s:.0f} s: {last_error}")
