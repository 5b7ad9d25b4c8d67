"""The embedded Apache Kafka's heap at rest (`ops/embedded_kafka.kafka_properties`, which the
tests' broker shares): what it keeps alive after a full collection, read with the JDK's own
`jcmd`. Its log cleaner's map, 128 MiB by Kafka's default and allocated at the start whether or
not a compacted topic exists, was half of the broker's memory (PSS 287 -> 155 MiB at 1,000
brokers re-registering, docs/scaling.md)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

LIVE_HEAP_LIMIT = 64 << 20


def test_the_broker_keeps_no_large_buffer_alive(apache_kafka_broker):
    if shutil.which("jcmd") is None:
        pytest.skip("the JDK's jcmd is not on PATH: the broker's heap cannot be read")
    pid = apache_kafka_broker.proc.pid  # the broker's JVM itself (ops.apache_kafka.start_kafka)
    # GC.class_histogram collects fully first: what it counts is what the broker keeps alive
    out = subprocess.run(["jcmd", str(pid), "GC.class_histogram"], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    total = re.search(r"^Total\s+\d+\s+(\d+)", out, re.MULTILINE)
    assert total is not None, out[-500:]
    largest = re.search(r"^\s*1:\s+\d+\s+(\d+)\s+(\S+)", out, re.MULTILINE)
    alive = int(total.group(1))
    assert alive < LIVE_HEAP_LIMIT, f"{alive >> 20} MiB alive; the largest class: {largest and largest.groups()}"
