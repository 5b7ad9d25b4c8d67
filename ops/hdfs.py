"""HDFS on the multi-host bed: a NameNode on one host and DataNodes on others, from the jars
`./run.sh` resolved (jvm/hdfs: Hadoop 3.5.0, the client pyspark bundles).

The Delta tables and the job's checkpoint live there (`hdfs://<namenode>:9000/...`): delta-rs
reaches it through its built-in hdfs-native client, Spark through the Hadoop client it ships, and
both commit a Delta version by a rename that does not overwrite, which the NameNode decides
atomically for every host (docs/deploy.md). Hosts have no DNS between them, so every address is an
IP and the NameNode does not check DataNode host names.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from conf import jvm
from ops.net import wait_for_port
from ops.netbed import Host

RPC_PORT, HTTP_PORT = 9000, 9870
_LOG4J = "log4j.rootLogger=INFO, out\nlog4j.appender.out=org.apache.log4j.ConsoleAppender\n" \
         "log4j.appender.out.layout=org.apache.log4j.PatternLayout\n" \
         "log4j.appender.out.layout.ConversionPattern=%d{ISO8601} %p %c{1}: %m%n\n"


def _site(props: dict[str, str]) -> str:
    body = "".join(f"  <property><name>{k}</name><value>{v}</value></property>\n" for k, v in props.items())
    return f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n'


@dataclass
class Hdfs:
    namenode: Host
    work_dir: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)  # host name -> its server
    hosts: dict[str, Host] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"hdfs://{self.namenode.addr}:{RPC_PORT}"

    def live_datanodes(self) -> int:
        query = f"http://{self.namenode.addr}:{HTTP_PORT}/jmx?qry=Hadoop:service=NameNode,name=FSNamesystemState"
        with urllib.request.urlopen(query, timeout=5) as r:
            beans = json.load(r)["beans"]
        return int(beans[0]["NumLiveDataNodes"]) if beans else 0

    def kill(self, host: str) -> None:
        proc = self.procs[host]
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def start(self, host: str) -> None:
        """(Re)start the server of `host` (the NameNode or a DataNode) with its data kept."""
        h = self.hosts[host]
        main = "org.apache.hadoop.hdfs.server.namenode.NameNode" if h == self.namenode \
            else "org.apache.hadoop.hdfs.server.datanode.DataNode"
        with open(self.work_dir / f"{host}.log", "ab") as out:
            self.procs[host] = subprocess.Popen(h.argv(_java(self.work_dir / host, main)), stdout=out,
                                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                start_new_session=True)

    def stop(self) -> None:
        for name in list(self.procs):
            try:
                self.kill(name)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.work_dir, ignore_errors=True)


def _java(conf_dir: Path, main: str, *args: str, heap: str = "384m") -> list[str]:
    classpath = os.pathsep.join([str(conf_dir), *(str(p) for p in jvm.jars("hdfs"))])
    return ["java", f"-Xmx{heap}", "-Xms64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Dhadoop.home.dir=" + str(conf_dir), "-cp", classpath, main, *args]


def _conf(work: Path, host: Host, namenode: Host) -> Path:
    conf = work / host.name
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "log4j.properties").write_text(_LOG4J)
    (conf / "core-site.xml").write_text(_site({"fs.defaultFS": f"hdfs://{namenode.addr}:{RPC_PORT}",
                                               "hadoop.tmp.dir": str(conf / "tmp")}))
    (conf / "hdfs-site.xml").write_text(_site({
        "dfs.namenode.name.dir": str(conf / "name"), "dfs.datanode.data.dir": str(conf / "data"),
        "dfs.namenode.rpc-address": f"{namenode.addr}:{RPC_PORT}",
        "dfs.namenode.http-address": f"{namenode.addr}:{HTTP_PORT}",
        "dfs.datanode.address": f"{host.addr}:9866", "dfs.datanode.http.address": f"{host.addr}:9864",
        "dfs.datanode.ipc.address": f"{host.addr}:9867", "dfs.datanode.hostname": host.addr,
        # no DNS between the hosts: IPs only, and the NameNode does not look DataNodes' names up
        "dfs.namenode.datanode.registration.ip-hostname-check": "false",
        "dfs.replication": "2", "dfs.permissions.enabled": "false",
        # with two DataNodes a write goes on with the one left when the other dies
        "dfs.client.block.write.replace-datanode-on-failure.policy": "NEVER",
        "dfs.namenode.safemode.extension": "0", "dfs.namenode.safemode.min.datanodes": "1",
        # a dead DataNode is declared dead after ~30 s, not 10.5 minutes
        "dfs.namenode.heartbeat.recheck-interval": "10000", "dfs.heartbeat.interval": "1"}))
    return conf


def start_hdfs(namenode: Host, datanodes: list[Host], *, timeout_s: float = 120.0) -> Hdfs:
    """Format a fresh NameNode, start it and the DataNodes; returns once all DataNodes are live."""
    work = Path(tempfile.mkdtemp(prefix="hdfs-"))
    fs = Hdfs(namenode, work, hosts={h.name: h for h in (namenode, *datanodes)})
    try:
        for host in (namenode, *datanodes):
            _conf(work, host, namenode)
        subprocess.run(namenode.argv(_java(work / namenode.name, "org.apache.hadoop.hdfs.server.namenode.NameNode",
                                           "-format", "-force", "-nonInteractive")),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for host in (namenode, *datanodes):
            fs.start(host.name)
        wait_for_port(RPC_PORT, timeout_s, host=namenode.addr)
        deadline = time.monotonic() + timeout_s
        while fs.live_datanodes() < len(datanodes):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{fs.live_datanodes()} of {len(datanodes)} DataNodes live after {timeout_s:.0f} s")
            time.sleep(0.5)
    except BaseException:
        fs.stop()
        raise
    return fs
