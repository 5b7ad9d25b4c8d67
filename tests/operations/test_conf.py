"""conf.load_config: defaults, environment overrides, clear errors."""

from __future__ import annotations

import pytest

from conf import ConfigError, load_config


def test_defaults_match_the_documented_contract():
    cfg = load_config({})
    assert (cfg.kafka_topic, cfg.http_host, cfg.http_port, cfg.broker_timeout_ms) == (
        "namesrv-events", "127.0.0.1", 9877, 120_000)
    assert cfg.uses_embedded_kafka and cfg.bootstrap == f"127.0.0.1:{cfg.kafka_embedded_port}"


def test_environment_overrides(tmp_path):
    cfg = load_config({"NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_KAFKA_BOOTSTRAP": "127.0.0.1:9092",
                       "NAMESRV_BROKER_TIMEOUT_MS": "5000", "NAMESRV_TRIGGER_INTERVAL_MS": "250"})
    assert cfg.warehouse == tmp_path / "delta" and not cfg.uses_embedded_kafka
    assert cfg.bootstrap == "127.0.0.1:9092" and cfg.broker_timeout_ms == 5000 and cfg.trigger_interval_ms == 250


@pytest.mark.parametrize("var, value, message", [
    ("NAMESRV_HTTP_PORT", "abc", "NAMESRV_HTTP_PORT='abc' is not an integer"),
    ("NAMESRV_BROKER_TIMEOUT_MS", "0", "NAMESRV_BROKER_TIMEOUT_MS must be positive"),
    ("NAMESRV_TRIGGER_INTERVAL_MS", "-5", "must not be negative"),
    ("NAMESRV_SPARK_DRIVER_MEMORY", "lots", "must be `auto` or a JVM memory size"),
    ("NAMESRV_JOB_STANDBY", "yes", "must be true or false"),
])
def test_bad_values_name_the_variable(var, value, message):
    with pytest.raises(ConfigError, match=message):
        load_config({var: value})


def test_replicas_shift_both_port_ranges_and_overlapping_ranges_are_refused(tmp_path):
    from ops.launcher import children, port_clash
    cfg = load_config({"NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_REPLICAS": "2", "NAMESRV_REMOTING_PORT": "10876"})
    assert (cfg.replica(1).http_port, cfg.replica(1).remoting_port) == (cfg.http_port + 1, 10877)
    kids = children(cfg)
    assert {k.name: k.port[1] for k in kids if k.port and k.name != "kafka"} == {
        "http": 9877, "remoting": 10876, "http-1": 9878, "remoting-1": 10877}
    assert port_clash(kids) is None
    clash = port_clash(children(load_config({"NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_REPLICAS": "2"})))
    assert clash is not None and "9877" in clash and "NAMESRV_REMOTING_PORT" in clash
    with pytest.raises(ConfigError, match="NAMESRV_REPLICAS"):
        load_config({"NAMESRV_REPLICAS": "0"})


def test_a_hosts_roles_choose_what_its_launcher_starts(tmp_path):
    """NAMESRV_ROLES: one machine runs everything; a driver host the job (and its standby); a
    serving host its replicas; neither starts an embedded broker (the hosts share one cluster)."""
    from ops.launcher import children
    base = {"NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_REMOTING_PORT": "10876"}
    shared = {**base, "NAMESRV_KAFKA_BOOTSTRAP": "10.77.0.1:9092"}
    assert [k.name for k in children(load_config(base))] == ["kafka", "job", "http", "remoting"]
    assert [k.name for k in children(load_config({**shared, "NAMESRV_ROLES": "job", "NAMESRV_JOB_STANDBY": "true"}))] \
        == ["job", "job-standby"]
    assert [k.name for k in children(load_config({**shared, "NAMESRV_ROLES": "serving", "NAMESRV_REPLICAS": "2"}))] \
        == ["http", "remoting", "http-1", "remoting-1"]
    with pytest.raises(ConfigError, match="NAMESRV_ROLES=job needs NAMESRV_KAFKA_BOOTSTRAP"):
        load_config({**base, "NAMESRV_ROLES": "job"})
    with pytest.raises(ConfigError, match="NAMESRV_ROLES"):
        load_config({**shared, "NAMESRV_ROLES": "kafka"})
