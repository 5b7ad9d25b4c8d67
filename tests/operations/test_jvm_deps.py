"""JVM dependencies (conf/jvm.py): resolved once, then no repository is needed; an artifact that
cannot be resolved is an error that names it and says what to do."""

from __future__ import annotations

import shutil

import pytest

from conf import jvm

pytestmark = pytest.mark.integration
UNREACHABLE = "http://127.0.0.1:9/maven2"  # nothing listens on the discard port


def test_every_declared_set_is_resolved_with_its_jars():
    for name in jvm.declared_sets():
        found = jvm.jars(name)
        assert found and all(p.suffix == ".jar" for p in found), name
    names = {p.name for p in jvm.jars("spark")}
    assert {"delta-spark_4.2_2.13-4.4.0.jar", "spark-sql-kafka-0-10_2.13-4.2.0.jar"} <= names
    assert not any(n.startswith(("spark-core_", "scala-library", "hadoop-client")) for n in names)  # pyspark has them


def test_a_resolved_set_needs_neither_maven_nor_a_repository(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda _: None)  # no mvn on PATH: it must not be needed
    assert jvm.resolve("spark", repository=UNREACHABLE) == jvm.jars("spark")


def test_an_unreachable_repository_is_a_clear_error_naming_the_artifact(tmp_path, monkeypatch):
    # An empty local Maven repository, so that nothing can come from the machine's cache.
    monkeypatch.setenv("MAVEN_OPTS", f"-Dmaven.repo.local={tmp_path / 'm2'}")
    with pytest.raises(jvm.JarsMissing) as failure:
        jvm.resolve("kafka", repository=UNREACHABLE, cache=tmp_path / "cache", progress=lambda _: None)
    message = str(failure.value)
    assert "Maven could not resolve org.apache.kafka:kafka_2.13" in message
    assert "NAMESRV_MAVEN_REPOSITORY" in message and "./run.sh setup" in message
    assert not (tmp_path / "cache" / "kafka").exists()  # nothing half-resolved is left to be trusted


def test_an_unresolved_set_says_how_to_resolve_it(tmp_path):
    with pytest.raises(jvm.JarsMissing, match=r"not resolved .* run './run.sh setup'"):
        jvm.jars("spark", cache=tmp_path)
