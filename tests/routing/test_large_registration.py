"""Issue 6: one broker registering 100,000 topics (RocketMQ fails near 60,000: its 16 MiB frame).

The registration is ~10 MB of JSON, so the publisher sends it as chunks under the 1 MiB record
limit; nothing of it may be visible until the last chunk is in, then all of it is.
"""

from __future__ import annotations

import time

import pytest
from deltalake import DeltaTable

from fleet.simulator import topic_table
from schemas import events as ev
from schemas import tables as t
from tests.harness import Pipeline
from tests.helpers import hb, reg

pytestmark = pytest.mark.integration

TOPICS = 100_000


@pytest.fixture(scope="module")
def pipe(spark, kafka_bootstrap, tmp_path_factory):
    p = Pipeline(spark, kafka_bootstrap, tmp_path_factory.mktemp("large")).start_job().start_http()
    yield p
    p.close()


def test_a_100k_topic_registration_is_chunked_applied_whole_and_served(pipe, figures):
    table = topic_table(TOPICS, queues=4)
    event = reg("broker-huge", 0, "127.0.0.1:20911", tps=table)
    whole_bytes = len(ev.encode(event)[1])
    parts = ev.chunk_registration(event, pipe.cfg.max_message_bytes)
    assert whole_bytes > 8 * pipe.cfg.max_message_bytes and len(parts) >= 9

    # All chunks but the last: consumed and committed, yet nothing of the broker is served.
    t0 = time.monotonic()
    coords = pipe.publish(parts[:-1])
    pipe.wait_served(coords, timeout=120)
    assert pipe.get("/topics/Topic-99999/route")[0] == 404
    assert "broker-huge" not in pipe.get("/cluster")[1]["brokerAddrTable"]

    # The last chunk: the whole registration at once.
    t1 = time.monotonic()
    coords = pipe.publish(parts[-1:])
    pipe.wait_served(coords, timeout=180)
    served_s = time.monotonic() - t1
    status, body = pipe.get("/topics/Topic-99999/route")
    assert status == 200
    assert body["queueDatas"] == [{"brokerName": "broker-huge", "readQueueNums": 4, "writeQueueNums": 4,
                                   "perm": 6, "topicSysFlag": 0}]
    topic_list = pipe.get("/topics")[1]["topicList"]
    assert len(set(topic_list) & set(table)) == TOPICS
    rows = DeltaTable(str(pipe.cfg.warehouse / t.TOPIC_QUEUE.name)).to_pyarrow_table(
        filters=[("brokerName", "=", "broker-huge")]).num_rows
    assert rows == TOPICS

    # A heartbeat and an unchanged re-registration (chunked again) keep all of it.
    t2 = time.monotonic()
    coords = pipe.publish([hb("broker-huge", 0, "127.0.0.1:20911"), event])
    pipe.wait_served(coords, timeout=180)
    rereg_s = time.monotonic() - t2
    assert pipe.get("/topics/TopicTest/route")[0] == 200
    assert len(set(pipe.get("/topics")[1]["topicList"]) & set(table)) == TOPICS
    figures(f"100,000-topic registration: {whole_bytes / 1e6:.1f} MB in {len(parts)} chunks; first chunks consumed "
            f"{t1 - t0:.1f} s, last chunk → served {served_s:.1f} s; heartbeat + chunked re-registration "
            f"→ served {rereg_s:.1f} s")
