"""The data engineers' notebooks execute headless against a generated history and draw their plots."""

from __future__ import annotations

import os
import time

import pytest

from schemas import events as ev
from tests.delta_history import SinkDriver
from tests.helpers import reg, topics

pytestmark = pytest.mark.integration
NOTEBOOKS = os.path.join(os.path.dirname(__file__), "..", "..", "notebooks")


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """A small story on disk: joins, a master switch, a wipe, an expiry, a delete and a KV put."""
    root = tmp_path_factory.mktemp("nb")
    d = SinkDriver(root / "delta")
    now = int(time.time() * 1000) - 60_000
    tps = topics("NbTopic", "NbBase")
    story = [
        [reg("nb-a", 0, "127.0.0.1:27911", tps=tps, cluster="NbCluster"),
         reg("nb-a", 1, "127.0.0.1:27912", tps=tps, cluster="NbCluster")],
        [reg("nb-b", 0, "127.0.0.1:27921", tps=tps, cluster="NbCluster", timeout_ms=2000)],
        [ev.unregister_broker_event(cluster="NbCluster", broker_name="nb-a", broker_id=0, addr="127.0.0.1:27911"),
         reg("nb-a", 0, "127.0.0.1:27912", tps=tps, cluster="NbCluster", counter=2)],
        [ev.wipe_write_perm_event("nb-a")],
        [],  # time passes: nb-b expires
        [ev.delete_topic_event("NbBase", "nb-a")],
        [ev.put_kv_event("ORDER_TOPIC_CONFIG", "NbTopic", "nb-a:8")],
    ]
    for i, events in enumerate(story):
        d.run_batch(events, now + i * 3000)
        time.sleep(0.02)  # distinct commit times
    return root


@pytest.mark.parametrize("name, figure", [("route_history", "route_history.png"),
                                          ("time_travel_audit", "time_travel_audit.png"),
                                          ("spark_sql", None)])
def test_notebook_runs_and_plots(history, name, figure, monkeypatch, figures):
    nbformat = pytest.importorskip("nbformat", reason="nbformat (test extra) is not installed")
    nbclient = pytest.importorskip("nbclient", reason="nbclient (test extra) is not installed")
    monkeypatch.setenv("NAMESRV_WAREHOUSE", str(history / "delta"))
    monkeypatch.setenv("NAMESRV_NOTEBOOK_OUT", str(history / "out"))
    monkeypatch.setenv("AUDIT_TOPIC", "NbTopic" if name == "spark_sql" else "NbBase")
    nb = nbformat.read(os.path.join(NOTEBOOKS, f"{name}.ipynb"), as_version=4)
    started = time.time()
    nbclient.NotebookClient(nb, timeout=180, kernel_name="python3",
                            resources={"metadata": {"path": NOTEBOOKS}}).execute()
    figures(f"notebook {name}: executed in {time.time() - started:.1f} s")
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    if name == "spark_sql":  # Spark SQL over the same tables: the route, the change counts, the history
        assert "topic = NbTopic" in text and "127.0.0.1:27912" in text  # nb-a's master after the switch
        assert "TOPIC_DELETED" in text and "QUEUE_ADDED" in text
        assert "WRITE" in text and "operationParameters" in text
        return
    png = history / "out" / figure
    assert png.exists() and png.stat().st_size > 5000
    assert "snapshots in" in text
    if name == "time_travel_audit":
        assert "topic = NbBase" in text and "TOPIC_DELETED" in str(nb.cells[-2].outputs)
