"""Apache Kafka itself, one KRaft node on 127.0.0.1, from the jars `./run.sh` resolved (jvm/kafka).

`./run.sh` embeds the same broker with its log kept in the data directory (ops/embedded_kafka.py);
this one is for the tests and benchmarks, most of which run on Tansu, that need a broker which
reports a partition's true end offset, as every real Kafka cluster does: Spark's Kafka connector
reads up to the end the broker reports, and Tansu reports the base offset of the last record
batch + 1 (our own source corrects for that; the connector cannot). Small heap, data in a
scratch directory, stopped with its process group; and a cluster of them on the multi-host bed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from conf.version import argument_parser
from ops.embedded_kafka import MAX_MESSAGE_BYTES, java_command, kafka_properties
from ops.net import free_port, wait_for_port
from ops.netbed import Host


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


def start_kafka(port: int | None = None, *, log: Path | None = None, timeout_s: float = 60.0) -> ApacheKafka:
    """Format a fresh KRaft log directory and start the broker; returns once it accepts connections."""
    port = port or free_port()
    work = Path(tempfile.mkdtemp(prefix="apache-kafka-"))
    props = work / "server.properties"
    props.write_text(kafka_properties(port, free_port(), work / "data", retention_check_ms=300_000, auto_create=True))
    subprocess.run(java_command("kafka.tools.StorageTool", "format", "-t", str(uuid.uuid4()), "-c", str(props),
                         "--ignore-formatted", heap="128m"),
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    out_path = log or work / "kafka.log"
    with open(out_path, "ab") as out:
        proc = subprocess.Popen(java_command("kafka.Kafka", str(props)), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    broker = ApacheKafka(f"127.0.0.1:{port}", work, proc)
    try:
        wait_for_port(port, timeout_s)
    except TimeoutError:
        broker.stop()
        raise
    return broker


@dataclass
class KafkaCluster:
    """Brokers on separate hosts of a bed (ops/netbed.py), each broker and controller at once:
    a three-voter KRaft quorum, topics replicated three times, two replicas in sync for a write."""

    bootstrap: str
    nodes: dict[str, subprocess.Popen[bytes]]  # host name -> its broker
    work_dir: Path

    def kill(self, host: str) -> None:
        """SIGKILL one broker (a crash): its partitions' leadership moves to the others."""
        proc = self.nodes[host]
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def leader(self, topic: str, partition: int = 0, timeout_s: float = 60.0) -> str:
        """The host leading `partition` of `topic`, once the metadata names a live one (node ids
        are the hosts' positions, from 1)."""
        from kafka import KafkaAdminClient
        deadline = time.monotonic() + timeout_s
        hosts = list(self.nodes)
        while True:
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=10_000)
            try:
                (meta,) = admin.describe_topics([topic])
                leader = next((p["leader_id"] for p in meta["partitions"] if p["partition_index"] == partition), -1)
            finally:
                admin.close()
            if leader > 0:
                return hosts[leader - 1]
            if time.monotonic() > deadline:
                raise TimeoutError(f"no leader for {topic}/{partition} after {timeout_s:.0f} s")
            time.sleep(0.5)

    def stop(self) -> None:
        for proc in self.nodes.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=10)
        shutil.rmtree(self.work_dir, ignore_errors=True)


CLUSTER_PORT, CLUSTER_CONTROLLER_PORT = 9092, 9093


def _cluster_properties(node_id: int, addr: str, voters: str, log_dir: Path) -> str:
    return "\n".join([
        "process.roles=broker,controller", f"node.id={node_id}", f"controller.quorum.voters={voters}",
        f"listeners=PLAINTEXT://{addr}:{CLUSTER_PORT},CONTROLLER://{addr}:{CLUSTER_CONTROLLER_PORT}",
        f"advertised.listeners=PLAINTEXT://{addr}:{CLUSTER_PORT}", "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT", f"log.dirs={log_dir}",
        # what a production cluster of three promises: every write on all three, acknowledged by two
        "default.replication.factor=3", "min.insync.replicas=2", "num.partitions=3",
        "offsets.topic.replication.factor=3", "transaction.state.log.replication.factor=3",
        "transaction.state.log.min.isr=2", "unclean.leader.election.enable=false",
        "group.initial.rebalance.delay.ms=0",
        f"message.max.bytes={MAX_MESSAGE_BYTES}", f"replica.fetch.max.bytes={MAX_MESSAGE_BYTES}",
        f"socket.request.max.bytes={2 * MAX_MESSAGE_BYTES}", "",
    ])


def start_cluster(hosts: list[Host], *, timeout_s: float = 90.0) -> KafkaCluster:
    """A broker on each of `hosts` (netbed.Host: name, addr, argv()), formatted with one cluster id."""
    work = Path(tempfile.mkdtemp(prefix="kafka-cluster-"))
    voters = ",".join(f"{i + 1}@{h.addr}:{CLUSTER_CONTROLLER_PORT}" for i, h in enumerate(hosts))
    cluster_id = str(uuid.uuid4())
    nodes: dict[str, subprocess.Popen[bytes]] = {}
    cluster = KafkaCluster(",".join(f"{h.addr}:{CLUSTER_PORT}" for h in hosts), nodes, work)
    try:
        for i, host in enumerate(hosts):
            props = work / f"{host.name}.properties"
            props.write_text(_cluster_properties(i + 1, host.addr, voters, work / host.name))
            subprocess.run(java_command("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props),
                                 "--ignore-formatted", heap="128m"),
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            with open(work / f"{host.name}.log", "ab") as out:
                nodes[host.name] = subprocess.Popen(host.argv(java_command("kafka.Kafka", str(props))),
                                                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                    start_new_session=True)
        for host in hosts:
            wait_for_port(CLUSTER_PORT, timeout_s, host=host.addr)
        _await_brokers(cluster.bootstrap, len(hosts), timeout_s)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _await_brokers(bootstrap: str, count: int, timeout_s: float) -> None:
    """Until the cluster's metadata lists `count` brokers (the quorum formed, every broker joined)."""
    from kafka import KafkaAdminClient
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5_000)
            try:
                if len(admin.describe_cluster()["brokers"]) >= count:
                    return
            finally:
                admin.close()
        except Exception as exc:  # not up yet: the quorum is still electing
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Kafka cluster at {bootstrap} did not form in {timeout_s:.0f} s: {exc}") from exc
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {count} brokers joined {bootstrap} in {timeout_s:.0f} s")
        time.sleep(0.5)


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
