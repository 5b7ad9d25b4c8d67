"""Property: for generated workloads (derandomized, i.e. fixed seeds), the whole system —
Kafka → Spark → Delta → HTTP — answers every route, cluster, topic-list and KV query exactly
as the independent model does. Broker events go to Kafka; admin and KV writes go through the
HTTP API (fan-out, auth, read-your-writes). Timeouts are long, so wall-clock time plays no part.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import Phase, given, settings

from tests.harness import Pipeline
from tests.model import ops
from tests.model.namesrv_model import NamesrvModel
from tests.model.test_model_vs_state_function import ops_normalised
from tests.scenarios.drivers import SystemDriver

pytestmark = pytest.mark.integration
EXAMPLES = 3
_counter = itertools.count()
_ran: list[int] = []


@pytest.fixture(scope="module")
def pipe(spark, kafka_bootstrap, tmp_path_factory):
    p = Pipeline(spark, kafka_bootstrap, tmp_path_factory.mktemp("model-system")).start_job().start_http()
    yield p
    p.close()


def prefixed(driver: SystemDriver, kind: str, a: dict) -> dict:
    out = dict(a)
    if "name" in out:
        out["name"] = driver.n(out["name"])
    if out.get("cluster"):
        out["cluster"] = driver.n(out["cluster"])
    if kind == "register":
        out["topics"] = {driver.n(t): {**c, "topicName": driver.n(t)} for t, c in out["topics"].items()}
        out["timeout"] = None  # the pipeline's 120 s default: no expiry during the test
    return out


def compare(model: NamesrvModel, d: SystemDriver, step: str) -> None:
    for topic in [*ops.TOPICS, "T9", "Base"]:
        assert d.route(topic) == model.pickup_topic_route_data(topic), f"{step}: route {topic}"
    assert d.cluster() == model.get_all_cluster_info(), f"{step}: cluster info"
    assert sorted(d.topic_list("all")) == model.get_all_topic_list(), f"{step}: all topics"
    for c in ops.CLUSTERS:
        assert sorted(d.topic_list("cluster", c)) == model.get_topics_by_cluster(c), f"{step}: topics of {c}"
    assert sorted(d.topic_list("system")) == model.get_system_topic_list(), f"{step}: system topics"
    assert sorted(d.topic_list("unit")) == model.get_unit_topics(), f"{step}: unit topics"
    assert sorted(d.topic_list("unit-sub")) == model.get_has_unit_sub_topic_list(), f"{step}: unit-sub"
    assert sorted(d.topic_list("unit-sub-ununit")) == model.get_has_unit_sub_un_unit_topic_list(), step
    for ns in ops.NAMESPACES:
        assert d.kv_list(ns) == model.get_kv_list_by_namespace(ns), f"{step}: kv {ns}"
        for key in ("T0", "k1"):
            assert d.kv_get(ns, key) == model.get_kv_config(ns, key), f"{step}: kv {ns}/{key}"


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None, phases=[Phase.generate])
@given(workload=ops.st.lists(ops.operations(ops.NAMES), min_size=15, max_size=30))
def run_example(pipe, workload):
    d = SystemDriver(pipe, f"m{next(_counter)}-")
    model = NamesrvModel()
    pending: list[tuple[int, int]] = []

    def flush():
        if pending:
            pipe.wait_served(pending)
            pending.clear()

    for i, (kind, a) in enumerate(workload):
        if kind == "advance":
            continue
        if kind in ("register", "heartbeat", "unregister"):
            event = ops.broker_event(kind, prefixed(d, kind, a))
            pending.extend(pipe.publish([event]))
            model.apply_event(ops_normalised(ops.broker_event(kind, {**a, "timeout": None}), 0))
            continue
        flush()
        if kind == "wipe":
            assert d.wipe(a["name"]) == model.wipe_write_perm_of_broker(a["name"])
        elif kind == "add":
            assert d.add(a["name"]) == model.add_write_perm_of_broker(a["name"])
        elif kind == "delete_topic":
            d.delete_topic(a["topic"], a["cluster"])
            model.delete_topic(a["topic"], a["cluster"])
        elif kind == "register_topic":
            d.register_topic(a["topic"], a["queueDatas"])
            model.register_topic(a["topic"], a["queueDatas"])
        elif kind == "kv_put":
            d.kv_put(a["ns"], a["key"], a["value"])
            model.put_kv_config(a["ns"], a["key"], a["value"])
        elif kind == "kv_delete":
            d.kv_delete(a["ns"], a["key"])
            model.delete_kv_config(a["ns"], a["key"])
        if i % 8 == 7:
            compare(model, d, f"step {i}")
    flush()
    compare(model, d, "end")
    _ran.append(len(workload))


def test_system_answers_like_the_model(pipe, figures):
    run_example(pipe)
    figures(f"model vs whole system: {len(_ran)} hypothesis examples (derandomized), {sum(_ran)} operations")
    assert len(_ran) == EXAMPLES
