"""Issue 5, Kafka faults: the embedded broker restarts (memory storage wiped, offsets back to 0)
while the job runs. The job waits, notices the reset, reads the new log from its start without
a crash loop; routes heal as brokers re-register; an acknowledged KV write is not lost."""

from __future__ import annotations

import time

import pytest

from ops import embedded_kafka
from ops.net import free_port
from tests.harness import Pipeline
from tests.helpers import hb, reg, topics

pytestmark = [pytest.mark.integration, pytest.mark.faults]


def test_broker_restart_with_wiped_log(spark, tmp_path, figures):
    port = free_port()
    tansu = embedded_kafka.start_tansu(port)
    p = None
    try:
        p = Pipeline(spark, f"127.0.0.1:{port}", tmp_path).start_job().start_http()
        a, b = "127.0.0.1:32911", "127.0.0.1:32921"
        p.wait_served(p.publish([reg("kf-a", 0, a, tps=topics("KfTopic", "KfBase"), cluster="KfCluster"),
                                 reg("kf-b", 0, b, tps=topics("KfTopic", "KfBase"), cluster="KfCluster")]))
        assert p.write("PUT", "/kv/kfns/acked", {"value": "before-restart"}) == (200, {"value": "before-restart"})
        p.wait_served(p.publish([hb("kf-a", 0, a) for _ in range(40)]))  # move the offsets well past 0

        tansu.terminate()
        tansu.wait(10)
        down_at = time.time()
        time.sleep(4)  # unreachable for a while: the job must keep running
        p.check_job()
        assert p.get("/topics/KfTopic/route")[0] == 200  # served from the last snapshot meanwhile
        tansu = embedded_kafka.start_tansu(port)
        # The job recreates the topic with its own partition count; nobody's metadata request
        # made the broker create it with its default (Tansu's 4), which moved keys to other partitions.
        assert p.wait_for(lambda: _partitions(p.cfg.bootstrap, p.cfg.kafka_topic), 60,
                          "the job to recreate the topic") == p.cfg.kafka_partitions
        # A write into the new log before the job believes the reset (GONE_CONFIRM_S): its offset
        # is below what the job read of the old log, yet it is answered only once served.
        assert p.write("PUT", "/kv/kfns/reset", {"value": "on-the-new-log"}) == (200, {"value": "on-the-new-log"})
        p.publisher.close()
        from eventlog.publisher import EventPublisher
        p.publisher = EventPublisher(p.cfg.bootstrap, p.cfg.kafka_topic, max_message_bytes=p.cfg.max_message_bytes)

        # Brokers re-register on the new (empty) log; a new one joins.
        c = "127.0.0.1:32931"
        p.publish([reg("kf-a", 0, a, tps=topics("KfTopic", "KfBase"), cluster="KfCluster", counter=2),
                   reg("kf-c", 0, c, tps=topics("KfNew", "KfBase"), cluster="KfCluster")])
        p.wait_for(lambda: p.get("/topics/KfNew/route")[0] == 200, 90, "a registration on the new log")
        healed = time.time() - down_at
        p.check_job()
        assert p.get("/kv/kfns/acked") == (200, {"value": "before-restart"})
        assert {q["brokerName"] for q in p.get("/topics/KfTopic/route")[1]["queueDatas"]} >= {"kf-a"}
        assert p.write("PUT", "/kv/kfns/after", {"value": "after-restart"}) == (200, {"value": "after-restart"})
        assert p.get("/kv/kfns/reset") == (200, {"value": "on-the-new-log"})
        figures(f"Kafka restart with a wiped log: routes served again {healed:.1f} s after the broker went down "
                f"(4 s of it unreachable); acknowledged KV write kept")
    finally:
        if p is not None:
            p.close()
        tansu.terminate()
        tansu.wait(10)


def _partitions(bootstrap: str, topic: str) -> int:
    """The topic's partition count (0: it does not exist), asked without creating it."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    except KafkaError:
        return 0
    try:
        if topic not in admin.list_topics():
            return 0
        described = admin.describe_topics([topic])
        return len(described[0]["partitions"]) if described else 0
    finally:
        admin.close()
