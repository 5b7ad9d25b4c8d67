"""The embedded Apache Kafka's heap at rest (`ops/embedded_kafka.kafka_properties`, which the
tests' broker shares): what it keeps alive after a full collection, read with the JDK's own
`jcmd`. Its log cleaner's map, 128 MiB by Kafka's default and allocated at the start whether or
not a compacted topic exists, was half of the broker's memory (PSS 287 -> 155 MiB at 1,000
brokers re-registering, docs/scaling.md)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

LIVE_HEAP_LIMIT = 64 << 20


def _broker_pid(bootstrap: str) -> int:
    """The java process whose server.properties listens on `bootstrap`."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"kafka.Kafka" not in argv:
            continue
        props = Path(argv[argv.index(b"kafka.Kafka") + 1].decode())
        if f"listeners=PLAINTEXT://{bootstrap}," in props.read_text():
            return int(proc.name)
    raise AssertionError(f"no Kafka broker process listens on {bootstrap}")


def test_the_broker_keeps_no_large_buffer_alive(apache_kafka):
    if shutil.which("jcmd") is None:
        pytest.skip("the JDK's jcmd is not on PATH: the broker's heap cannot be read")
    pid = _broker_pid(apache_kafka)
    # GC.class_histogram collects fully first: what it counts is what the broker keeps alive
    out = subprocess.run(["jcmd", str(pid), "GC.class_histogram"], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    total = re.search(r"^Total\s+\d+\s+(\d+)", out, re.MULTILINE)
    assert total is not None, out[-500:]
    largest = re.search(r"^\s*1:\s+\d+\s+(\d+)\s+(\S+)", out, re.MULTILINE)
    alive = int(total.group(1))
    assert alive < LIVE_HEAP_LIMIT, f"{alive >> 20} MiB alive; the largest class: {largest and largest.groups()}"
