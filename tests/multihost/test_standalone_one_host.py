"""Issue 6: the job runs unchanged on a Spark standalone cluster (master + 2 workers on 127.0.0.1).

The job is `python -m pipelines.job` with only NAMESRV_SPARK_MASTER changed; the step and the
Kafka source run in executor JVMs' Python workers under the two workers, the sink in the driver.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ops.standalone import start_cluster
from tests.harness import Pipeline
from tests.helpers import hb, reg, topics

pytestmark = [pytest.mark.integration, pytest.mark.multihost]  # with the other cluster tests: ./run.sh multihost

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("standalone"), workers=2, cores=1, memory="1g")
    yield c
    c.stop()


def test_the_job_runs_on_a_standalone_cluster(cluster, source, source_bootstrap, tmp_path, figures):
    kafka_bootstrap = source_bootstrap
    env = {"NAMESRV_TRIGGER_INTERVAL_MS": "500", "NAMESRV_KAFKA_SOURCE": source}
    p = Pipeline(None, kafka_bootstrap, tmp_path / "data", **env).start_http()
    earlier_apps = set(cluster.work_dir.glob("worker-*/app-*"))
    job_env = {**os.environ, **env, "NAMESRV_DATA_DIR": str(p.cfg.data_dir), "NAMESRV_KAFKA_BOOTSTRAP": kafka_bootstrap,
               "NAMESRV_KAFKA_TOPIC": p.cfg.kafka_topic, "NAMESRV_SPARK_MASTER": cluster.master_url,
               "PYSPARK_PYTHON": sys.executable}
    log = tmp_path / "job.log"
    started = time.monotonic()
    with open(log, "wb") as out:
        job = subprocess.Popen([sys.executable, "-m", "pipelines.job"], cwd=ROOT, env=job_env, stdout=out,
                               stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # Publish once the job runs batches (executors up), so the 8 s timeout below is not
        # eaten by the cluster's start.
        progress = p.cfg.warehouse / "_progress.json"
        p.wait_for(lambda: progress.exists() or job.poll() is not None, 180, "the job's first batch")
        assert job.poll() is None, log.read_text()[-3000:]
        first_batch_s = time.monotonic() - started
        tps = topics("TopicTest", "OnCluster")
        coords = p.publish([reg("broker-c0", 0, "127.0.0.1:30911", tps=tps),
                            reg("broker-c1", 0, "127.0.0.1:30921", tps=tps, timeout_ms=8000)])
        t0 = time.monotonic()
        p.wait_served(coords, timeout=60)
        served_s = time.monotonic() - t0
        status, body = p.get("/topics/OnCluster/route")
        assert status == 200 and [q["brokerName"] for q in body["queueDatas"]] == ["broker-c0", "broker-c1"]

        # Expiry runs in the executors too: broker-c1 stops heartbeating and leaves; broker-c0 stays.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            p.publish([hb("broker-c0", 0, "127.0.0.1:30911")])
            if [q["brokerName"] for q in p.get("/topics/OnCluster/route")[1].get("queueDatas", [])] == ["broker-c0"]:
                break
            assert job.poll() is None, log.read_text()[-3000:]
            time.sleep(1)
        else:
            raise AssertionError("broker-c1 was not expired on the standalone cluster")

        # The work really ran under both workers: each launched an executor for the job.
        apps = {w.name: sorted(x.name for x in w.iterdir() if x.name.startswith("app-") and x not in earlier_apps)
                for w in sorted(cluster.work_dir.glob("worker-*")) if w.is_dir()}
        assert len(apps) == 2 and all(apps.values()), apps
        # An executor fetches the job's code archive, and the jars of spark.jars (Delta, Spark's
        # Kafka connector), when it is handed its first task.
        ours = [z for z in cluster.work_dir.glob("worker-*/app-*/*/namesrv-code.zip") if z.parents[1] not in earlier_apps]
        assert sorted(z.parts[-4] for z in ours) == ["worker-0", "worker-1"], ours
        shipped = {j.name for z in ours for j in z.parent.glob("*.jar")}
        assert {"spark-sql-kafka-0-10_2.13-4.2.0.jar", "delta-spark_4.2_2.13-4.4.0.jar"} <= shipped, shipped
        figures(f"standalone cluster (master + 2 workers), {source} source: job start → first batch {first_batch_s:.1f} s, "
                f"publish → served {served_s:.1f} s; "
                f"executors under {', '.join(apps)}")
    finally:
        os.kill(job.pid, 15)  # the job stops its query and its JVM itself (the JVM shares its group)
        try:
            job.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, 9)
            job.wait(timeout=10)
        p.close()
    assert job.returncode == 0, log.read_text()[-3000:]
