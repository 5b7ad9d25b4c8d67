"""The event log past one machine: three Apache Kafka brokers on three hosts (KRaft, replication
factor 3, min.insync.replicas 2), our publisher with acks=all. Killing the partition leader in the
middle of publishing loses nothing that was acknowledged."""

from __future__ import annotations

import time

import pytest

from tests.helpers import reg, topics, wait

pytestmark = pytest.mark.multihost
KAFKA_HOSTS = ["kafka-1", "kafka-2", "kafka-3"]


@pytest.fixture(scope="module")
def kafka_cluster(bed_factory):
    from ops.apache_kafka import start_cluster
    bed = bed_factory(KAFKA_HOSTS, "k")
    cluster = start_cluster([bed.hosts[h] for h in KAFKA_HOSTS])
    yield bed, cluster
    cluster.stop()


def test_killing_the_partition_leader_loses_no_acknowledged_event(kafka_cluster, figures):
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

    from eventlog.publisher import EventPublisher
    from eventlog.topics import ensure_topic
    _bed, cluster = kafka_cluster
    topic = "namesrv-multihost-events"
    # the job's own path: it retries while the admin client's view of the cluster is partial (a
    # controller id it has no address for yet, seen once in CI right after the cluster formed); three
    # copies asked, since the broker asked may list two of three for a moment (seen in CI)
    assert ensure_topic(cluster.bootstrap, topic, 1, {"min.insync.replicas": "2"}, copies=3) == 1
    # a fresh admin client may ask a broker whose metadata has not yet caught up with the topic
    # (seen in CI: an empty partition list just after ensure_topic saw it), so ask until it is listed
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    partitions = wait(lambda: admin.describe_topics([topic])[0]["partitions"], 30, f"{topic}'s partitions listed")
    admin.close()
    replicas = partitions[0]["replica_nodes"]
    assert len(replicas) == 3, f"the topic has {len(replicas)} copies on a 3-broker cluster"
    leader = cluster.leader(topic)
    acknowledged, failed = [], 0
    started = time.monotonic()
    with EventPublisher(cluster.bootstrap, topic, max_message_bytes=1 << 20) as pub:
        for i in range(400):  # bounded: 400 registrations, one at a time
            if i == 150:
                cluster.kill(leader)
                killed_at = time.monotonic()
            event = reg(f"mh-{i % 20}", 0, f"10.9.0.{i % 20 + 1}:10911", tps=topics(f"MhTopic{i}", "MhBase"))
            try:
                acknowledged += [(c, event["topicConfigTable"]) for c in pub.publish([event])]
            except Exception:  # not acknowledged: the caller would retry; nothing is promised for it
                failed += 1
            assert time.monotonic() - started < 180
    after = cluster.leader(topic)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=10_000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    read = {(m.partition, m.offset) for m in consumer}
    consumer.close()
    lost = [c for c, _ in acknowledged if c not in read]
    figures(f"kafka cluster (3 hosts, RF 3, min ISR 2, acks=all): leader {leader} SIGKILLed after 150 of 400 "
            f"events; {len(acknowledged)} acknowledged, {failed} refused during the election, {len(lost)} lost; "
            f"new leader {after}, {time.monotonic() - killed_at:.1f} s from the kill to the end")
    assert after != leader
    assert not lost
    assert len(acknowledged) >= 390
