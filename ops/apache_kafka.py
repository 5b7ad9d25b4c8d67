"""Apache Kafka itself, one KRaft node on 127.0.0.1, from the jars `./run.sh` resolved (jvm/kafka).

The embedded Tansu broker is what `./run.sh` starts; this one exists for the tests and benchmarks
that need a broker which reports a partition's true end offset, as every real Kafka cluster does:
Spark's Kafka connector reads up to the end the broker reports, and Tansu reports the base
offset of the last record batch + 1 (our own source corrects for that; the connector cannot).
Small heap, data in a scratch directory, stopped with its process group.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from conf import jvm
from conf.version import argument_parser
from ops.net import free_port, wait_for_port

# Above the largest record the tests send on purpose (oversize records must arrive and be
# dead-lettered, as with Tansu, which accepts 20 MiB); producers ask for up to 32 MiB.
MAX_MESSAGE_BYTES = 33_554_432


@dataclass
class ApacheKafka:
    bootstrap: str
    work_dir: Path
    proc: subprocess.Popen[bytes]

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> ApacheKafka:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _properties(port: int, controller_port: int, log_dir: Path) -> str:
    return "\n".join([
        "process.roles=broker,controller", "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
        f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        f"log.dirs={log_dir}", "num.partitions=2", "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        f"message.max.bytes={MAX_MESSAGE_BYTES}", f"replica.fetch.max.bytes={MAX_MESSAGE_BYTES}",
        f"socket.request.max.bytes={2 * MAX_MESSAGE_BYTES}", "",
    ])


def _java(classpath: str, main: str, *args: str, heap: str = "256m") -> list[str]:
    return ["java", f"-Xmx{heap}", "-Xms64m", "-XX:+UseSerialGC", "-cp", classpath, main, *args]


def start_kafka(port: int | None = None, *, log: Path | None = None, timeout_s: float = 60.0) -> ApacheKafka:
    """Format a fresh KRaft log directory and start the broker; returns once it accepts connections."""
    classpath = os.pathsep.join(str(p) for p in jvm.jars("kafka"))
    port = port or free_port()
    work = Path(tempfile.mkdtemp(prefix="apache-kafka-"))
    props = work / "server.properties"
    props.write_text(_properties(port, free_port(), work / "data"))
    subprocess.run(_java(classpath, "kafka.tools.StorageTool", "format", "-t", str(uuid.uuid4()), "-c", str(props),
                         "--ignore-formatted", heap="128m"),
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    out_path = log or work / "kafka.log"
    with open(out_path, "ab") as out:
        proc = subprocess.Popen(_java(classpath, "kafka.Kafka", str(props)), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    broker = ApacheKafka(f"127.0.0.1:{port}", work, proc)
    try:
        wait_for_port(port, timeout_s)
    except TimeoutError:
        broker.stop()
        raise
    return broker


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser("python -m ops.apache_kafka", "Run a one-node Apache Kafka (KRaft) on 127.0.0.1 "
                             "until Ctrl-C; prints its bootstrap address.")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    broker = start_kafka(args.port or None)
    print(broker.bootstrap, flush=True)
    try:
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
