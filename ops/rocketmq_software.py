"""RocketMQ's own software, run small on 127.0.0.1 from the jars `./run.sh` resolved: its
NameServer, brokers (master, slave), mqadmin and a Java producer/consumer, of each release line
the project is checked against (`LINES`: jvm/rocketmq-4.9, jvm/rocketmq for 5.3, jvm/rocketmq-5.5).

The tests point them at our remoting front; the benchmark runs RocketMQ's NameServer beside it.
Each process gets a scratch home (`-Duser.home`, `-Drocketmq.home.dir`: stores, logs, configs
live there) and names its logback configuration explicitly: with every jar on one classpath,
a process without `-Drmq.logback.configurationFile` would pick the broker's.

    ns = start_namesrv()                       # RocketMQ 5.3's NameServer on a free port
    broker = start_broker(ns.addr, broker_name="broker-a", line="4.9")
    with AdminShell(ns.addr, line="5.5") as admin:
        print(admin.run("clusterList"))
    run_client("Produce", ns.addr, "TopicTest", "100", line="4.9")
    broker.stop(); ns.stop()

4.9 reads its logback configuration from `${rocketmq.home.dir}/conf/logback_<role>.xml` (5.x from
the jars, named by `-Drmq.logback.configurationFile`), so a 4.9 process's home gets one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from conf import jvm
from ops.net import free_port, port_is_free, wait_for_port

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "jvm" / "rocketmq" / "programs"
_OPENS = ["--add-exports=java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens=java.base/java.nio=ALL-UNNAMED",
          "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens=java.base/java.lang=ALL-UNNAMED"]
_SMALL = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k"]

# Release line -> the JVM dependency set holding its jars (the version is the set's pom's).
LINES = {"4.9": "rocketmq-4.9", "5.3": "rocketmq", "5.5": "rocketmq-5.5"}
DEFAULT_LINE = "5.3"  # the release docs/semantics.md and the remoting front are written against
# 4.9 reads conf/logback_<role>.xml under its home, the role being the one 5.x's
# `rmq.<role>.logback.xml` names
_LOGBACK_XML = """<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>${user.home}/logs/rocketmqlogs/%s.log</file>
    <encoder><pattern>%%d %%p %%t - %%m%%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""


def _jar_set(line: str) -> str:
    try:
        return LINES[line]
    except KeyError:
        raise ValueError(f"no RocketMQ line {line!r} (lines: {', '.join(LINES)})") from None


def version(line: str = DEFAULT_LINE) -> str:
    """The release a line runs, as its pom declares it (e.g. 4.9.7)."""
    return jvm.declared_artifacts(_jar_set(line))[0].rsplit(":", 1)[1]


def classpath(extra: list[Path] | None = None, line: str = DEFAULT_LINE) -> str:
    return os.pathsep.join(str(p) for p in [*(extra or []), *jvm.jars(_jar_set(line))])


def java(main: str, *args: str, home: Path, logback: str, heap: str = "128m", props: dict[str, str] | None = None,
         extra_cp: list[Path] | None = None, opts: list[str] | None = None, line: str = DEFAULT_LINE) -> list[str]:
    """The java command line for one of RocketMQ's entry points (or a program of ours)."""
    flags = [f"-D{k}={v}" for k, v in (props or {}).items()]
    if line == "4.9":
        role = logback.split(".")[1]
        (home / "conf").mkdir(exist_ok=True)
        (home / "conf" / f"logback_{role}.xml").write_text(_LOGBACK_XML % role)
    return ["java", f"-Xmx{heap}", "-Xms32m", *_SMALL, *_OPENS, *(opts or []), f"-Duser.home={home}",
            f"-Drocketmq.home.dir={home}", f"-Drmq.logback.configurationFile={logback}", *flags,
            "-cp", classpath(extra_cp, line), main, *args]


@dataclass
class JavaProcess:
    name: str
    proc: subprocess.Popen[bytes]
    home: Path
    log_path: Path
    addr: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM: RocketMQ's shutdown hooks run (a broker unregisters from its NameServers)."""
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc.wait()

    def kill(self) -> None:
        """SIGKILL: no shutdown hook, the TCP connections just drop (a crash)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def cleanup(self, *, graceful: bool = False) -> None:
        """Stop (SIGTERM, `graceful`: a broker's shutdown takes ~10 s) or kill, and remove its home."""
        if graceful:
            self.stop()
        else:
            self.kill()
        shutil.rmtree(self.home, ignore_errors=True)


def spawn(name: str, argv: list[str], home: Path) -> JavaProcess:
    """`argv` started in its own session with `home` as its directory, output to `<home>/<name>.out`."""
    log_path = home / f"{name}.out"
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=home)
    return JavaProcess(name, proc, home, log_path)


def _await(p: JavaProcess, port: int, banner: str, timeout_s: float) -> JavaProcess:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not p.alive():
            tail = p.log_text()[-3000:]
            p.cleanup()
            raise RuntimeError(f"{p.name} exited with {p.proc.returncode}:\n{tail}")
        if banner in p.log_text():
            wait_for_port(port, max(1.0, deadline - time.monotonic()))
            return p
        time.sleep(0.2)
    tail = p.log_text()[-3000:]
    p.cleanup()
    raise TimeoutError(f"{p.name} did not start within {timeout_s:.0f} s:\n{tail}")


def _home(prefix: str) -> Path:
    home = Path(tempfile.mkdtemp(prefix=prefix))
    (home / "conf").mkdir()
    return home


def start_namesrv(port: int | None = None, *, timeout_s: float = 60.0, heap: str = "128m",
                  full_jit: bool = False, direct_memory: str | None = "64m", line: str = DEFAULT_LINE) -> JavaProcess:
    """RocketMQ's NameServer (NamesrvStartup), small: 2 worker threads, 128 MiB heap by default,
    C1 only unless `full_jit` (benchmarks: the JIT a production JVM runs), Netty's direct memory
    capped at `direct_memory` (None: the JVM's default, the heap's ceiling, as RocketMQ's own
    start script leaves it; a 10,000-broker fleet registering at once needs more than 64 MiB)."""
    port = port or free_port()
    home = _home("rmq-namesrv-")
    conf = home / "namesrv.properties"
    conf.write_text("\n".join([f"listenPort={port}", "bindAddress=127.0.0.1", f"kvConfigPath={home}/kvConfig.json",
                               "defaultThreadPoolNums=2", "clientRequestThreadPoolNums=2", "serverWorkerThreads=2",
                               "serverSelectorThreads=1", ""]))
    return _run_namesrv(java("org.apache.rocketmq.namesrv.NamesrvStartup", "-c", str(conf), home=home,
                             logback="rmq.namesrv.logback.xml", heap=heap,
                             opts=[*([f"-XX:MaxDirectMemorySize={direct_memory}",
                                      "-Dio.netty.allocator.numDirectArenas=1"] if direct_memory else []),
                                   *(["-XX:TieredStopAtLevel=4"] if full_jit else [])], line=line),
                        home, port, line, timeout_s)


def _run_namesrv(argv: list[str], home: Path, port: int, line: str, timeout_s: float) -> JavaProcess:
    p = spawn("namesrv", argv, home)
    p.addr = f"127.0.0.1:{port}"
    p.extra = {"line": line}
    return _await(p, port, "The Name Server boot success", timeout_s)


# `bin/runserver.sh`'s JVM options on Java 9 and later (5.3.3's `choose_gc_options`, then the lines
# after it), the GC log under the process's home instead of /dev/shm
RUNSERVER_OPTS = ["-server", "-Xms4g", "-Xmx4g", "-XX:MetaspaceSize=128m", "-XX:MaxMetaspaceSize=320m",
                  "-XX:+UseG1GC", "-XX:G1HeapRegionSize=16m", "-XX:G1ReservePercent=25",
                  "-XX:InitiatingHeapOccupancyPercent=30", "-XX:SoftRefLRUPolicyMSPerMB=0",
                  "-XX:-OmitStackTraceInFastThrow", "-XX:-UseLargePages"]


def start_namesrv_as_shipped(port: int | None = None, *, timeout_s: float = 60.0,
                             line: str = DEFAULT_LINE) -> JavaProcess:
    """RocketMQ's NameServer as its own start script starts it, for the benchmarks: runserver.sh's
    JVM options (4 GiB heap, G1, full JIT) and NamesrvConfig's and NettyServerConfig's default
    pools (16 default and 8 client-request threads, 8 Netty workers, 3 selectors); only the port,
    the loopback address and the KV file's path are set."""
    port = port or free_port()
    home = _home("rmq-namesrv-")
    conf = home / "namesrv.properties"
    conf.write_text(f"listenPort={port}\nbindAddress=127.0.0.1\nkvConfigPath={home}/kvConfig.json\n")
    gc_log = f"-Xlog:gc*:file={home}/rmq_srv_gc_%p_%t.log:time,tags:filecount=5,filesize=30M"
    argv = ["java", *RUNSERVER_OPTS, gc_log, *_OPENS, f"-Duser.home={home}", f"-Drocketmq.home.dir={home}",
            "-Drmq.logback.configurationFile=rmq.namesrv.logback.xml", "-cp", classpath(None, line),
            "org.apache.rocketmq.namesrv.NamesrvStartup", "-c", str(conf)]
    return _run_namesrv(argv, home, port, line, timeout_s)


def broker_port() -> int:
    """A listen port p with p-2 (the broker's fast port) and p+1 (its HA port) free as well."""
    for _ in range(200):
        p = free_port()
        if p > 2 and all(port_is_free(q) for q in (p - 2, p + 1)):
            return p
    raise RuntimeError("no free port triple for a broker")


def start_broker(namesrv_addr: str, *, cluster: str = "DefaultCluster", broker_name: str = "broker-a",
                 broker_id: int = 0, port: int | None = None, extra: dict[str, str] | None = None,
                 access_key: str | None = None, secret_key: str | None = None, timeout_s: float = 90.0,
                 line: str = DEFAULT_LINE) -> JavaProcess:
    """A broker (BrokerStartup) of `line` with small stores; `extra` adds broker.conf properties
    (a line ignores those it does not know). With a key pair it signs its NameServer requests
    (`innerClientAuthenticationCredentials`, 5.x). Without a `port`, free ports are picked, and
    picked again if another process took one of the three before the broker bound it."""
    for attempt in range(3):
        try:
            return _start_broker(namesrv_addr, cluster=cluster, broker_name=broker_name, broker_id=broker_id,
                                 port=port or broker_port(), extra=extra, access_key=access_key,
                                 secret_key=secret_key, timeout_s=timeout_s, line=line)
        except RuntimeError as exc:
            if port is not None or attempt == 2 or "Address already in use" not in str(exc):
                raise
    raise AssertionError("unreachable")


def _start_broker(namesrv_addr: str, *, cluster: str, broker_name: str, broker_id: int, port: int,
                  extra: dict[str, str] | None, access_key: str | None, secret_key: str | None, timeout_s: float,
                  line: str) -> JavaProcess:
    home = _home(f"rmq-{broker_name}-{broker_id}-")
    store = home / "store"
    props = {
        "brokerClusterName": cluster, "brokerName": broker_name, "brokerId": str(broker_id),
        "brokerRole": "ASYNC_MASTER" if broker_id == 0 else "SLAVE", "flushDiskType": "ASYNC_FLUSH",
        "namesrvAddr": namesrv_addr, "brokerIP1": "127.0.0.1", "brokerIP2": "127.0.0.1", "listenPort": str(port),
        "haListenPort": str(port + 1), "bindAddress": "127.0.0.1", "storePathRootDir": str(store),
        "storePathCommitLog": str(store / "commitlog"), "autoCreateTopicEnable": "true",
        "mappedFileSizeCommitLog": str(64 * 1024 * 1024), "mappedFileSizeConsumeQueue": "120000",
        # the timer wheel stays on (38.7 MB of direct memory): 5.3.3's deleteTopic in the broker fails
        # without it (TimerMessageStore is null), and mqadmin's deleteTopic never reaches the NameServer
        "timerWheelEnable": "true", "mappedFileSizeTimerLog": str(16 * 1024 * 1024), "messageIndexEnable": "false",
        "diskSpaceWarningLevelRatio": "98",
        # a send waits up to 200 ms in the broker's queue (1 s for the page-cache lock) before the
        # broker answers SYSTEM_BUSY "[TIMEOUT_CLEAN_QUEUE]broker busy", which no client retries; on
        # a loaded 2-core CI host a 4.9 client's send to a 5.3 broker met it (period 201 ms). The
        # tests check what the NameServer routes, not the broker's flow control, so both wait 10 s.
        "waitTimeMillsInSendQueue": "10000", "osPageCacheBusyTimeOutMills": "10000",
        "serverWorkerThreads": "2", "serverSelectorThreads": "1", **(extra or {})}
    if access_key and secret_key:
        props["innerClientAuthenticationCredentials"] = f'{{"accessKey":"{access_key}","secretKey":"{secret_key}"}}'
        # 5.3 stores that inner user in its auth metadata at start, so a metadata provider is required
        props.setdefault("authenticationMetadataProvider",
                         "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider")
    conf = home / "broker.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    argv = java("org.apache.rocketmq.broker.BrokerStartup", "-c", str(conf), home=home,
                logback="rmq.broker.logback.xml", heap="256m",
                opts=["-XX:MaxDirectMemorySize=128m", "-Dio.netty.allocator.numDirectArenas=2", "-Xms256m"], line=line)
    p = spawn(f"broker-{broker_name}-{broker_id}", argv, home)
    p.addr = f"127.0.0.1:{port}"
    p.extra = {"ha": f"127.0.0.1:{port + 1}", "brokerName": broker_name, "line": line}
    return _await(p, port, "boot success", timeout_s)


def _tools_home(access_key: str | None, secret_key: str | None) -> Path:
    home = _home("rmq-tools-")
    if access_key and secret_key:  # mqadmin signs with ${ROCKETMQ_HOME}/conf/tools.yml
        (home / "conf" / "tools.yml").write_text(f"accessKey: {access_key}\nsecretKey: {secret_key}\n")
    return home


class AdminShell:
    """mqadmin of `line`, commands run one after another in one JVM (jvm/rocketmq/programs/AdminShell.java
    calls MQAdminStartup.main0, what the mqadmin script runs): a JVM start per command costs ~5 s.
    With a key pair, every command signs (conf/tools.yml)."""

    def __init__(self, namesrv_addr: str, *, access_key: str | None = None, secret_key: str | None = None,
                 line: str = DEFAULT_LINE) -> None:
        self.namesrv_addr = namesrv_addr
        self.home = _tools_home(access_key, secret_key)
        self.proc = subprocess.Popen(java("AdminShell", home=self.home, logback="rmq.tools.logback.xml",
                                          extra_cp=[compiled_programs(line)], line=line),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, cwd=self.home, start_new_session=True)

    def run(self, command: str, *args: str) -> str:
        """The command's output (stdout and stderr, in order)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("\t".join([command, "-n", self.namesrv_addr, *args]) + "\n")
        self.proc.stdin.flush()
        lines: list[str] = []
        for line in self.proc.stdout:
            head, end, _ = line.partition("@@END@@")  # 4.9's updateTopic ends its output without a newline
            lines.append(head)
            if end:
                return "".join(lines)
        raise RuntimeError(f"mqadmin shell exited ({self.proc.poll()}): {''.join(lines)[-2000:]}")

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> AdminShell:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def compiled_programs(line: str = DEFAULT_LINE) -> Path:
    """Our Java programs (jvm/rocketmq/programs/*.java) compiled against `line`'s jars, once per
    source hash and line, into .jvm/."""
    sources = sorted(PROGRAMS.glob("*.java"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:16]
    out = ROOT / ".jvm" / "rocketmq-programs" / f"{digest}-{line}"
    if not (out / ".done").exists():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        subprocess.run(["javac", "-nowarn", "-cp", classpath(line=line), "-d", str(out), *map(str, sources)],
                       check=True, capture_output=True, text=True)
        (out / ".done").write_text("")
    return out


def run_client(program: str, *args: str, timeout_s: float = 120.0, serialize_type: str | None = None,
               access_key: str | None = None, secret_key: str | None = None,
               line: str = DEFAULT_LINE) -> subprocess.CompletedProcess[str]:
    """Run one of our Java client programs (Produce, Consume, RouteLoad) on `line`'s client;
    `serialize_type="ROCKETMQ"` makes the client send binary headers, as RocketMQ's benchmark
    tools do."""
    home = _home("rmq-client-")
    props = {"rocketmq.client.logRoot": str(home / "logs")}
    if serialize_type:
        props["rocketmq.serialize.type"] = serialize_type
    try:
        env = {**os.environ, **({"RMQ_ACCESS_KEY": access_key, "RMQ_SECRET_KEY": secret_key}
                                if access_key and secret_key else {})}
        return subprocess.run(java(program, *args, home=home, logback="rmq.client.logback.xml", heap="192m",
                                   props=props, extra_cp=[compiled_programs(line)], line=line),
                              capture_output=True, text=True, timeout=timeout_s, cwd=home, env=env)
    finally:
        shutil.rmtree(home, ignore_errors=True)
