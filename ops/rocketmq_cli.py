"""`./run.sh rocketmq ...`: RocketMQ's own broker, sample clients and mqadmin, run from the jars
`./run.sh` resolved (jvm/rocketmq*/pom.xml), pointed at a NameServer (this system's remoting
front by default). A thin front over ops/rocketmq_software.py, for the quick start
(docs/quickstart-rocketmq.md) and for trying things by hand:

    ./run.sh rocketmq broker                  # a broker (broker-a of DefaultCluster) until Ctrl-C
    ./run.sh rocketmq producer                # RocketMQ's quickstart Producer: 1,000 messages to TopicTest
    ./run.sh rocketmq consumer                # RocketMQ's quickstart Consumer of TopicTest, until Ctrl-C
    ./run.sh rocketmq mqadmin topicRoute -t TopicTest -n 127.0.0.1:9876
    ./run.sh rocketmq example org.apache.rocketmq.example.simple.AsyncProducer   # any sample of rocketmq-example

The NameServer address is `-n`, else RocketMQ's own variable NAMESRV_ADDR, else this system's
remoting front (127.0.0.1:NAMESRV_REMOTING_PORT). The sample programs are rocketmq-example
5.5.0's (the release Maven Central has them for); the broker and mqadmin run 5.5.0 too unless
`--line` names another line the project is checked against (4.9, 5.3).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from conf import Config, jvm, load_config
from conf.version import argument_parser
from ops import rocketmq_software as rmq
from ops.net import port_is_free

LINE = "5.5"  # the line whose jar set holds rocketmq-example (jvm/rocketmq-5.5/pom.xml)
EXAMPLES = "org.apache.rocketmq.example"
PRODUCER, CONSUMER = f"{EXAMPLES}.quickstart.Producer", f"{EXAMPLES}.quickstart.Consumer"
BROKER_PORT = 10911  # RocketMQ's default listenPort (its fast port is 10909, its HA port 10912)


def namesrv_addr(given: str | None, cfg: Config) -> str:
    """`-n`, else NAMESRV_ADDR (what RocketMQ's broker, clients and mqadmin read), else this system's front."""
    return given or os.environ.get("NAMESRV_ADDR") or f"127.0.0.1:{cfg.remoting_port or 9876}"


def key_pair(cfg: Config) -> tuple[str | None, str | None]:
    """The system's remoting key pair when both halves are set (else none): what a broker signs its
    requests and mqadmin its admin writes with."""
    if cfg.remoting_access_key and cfg.remoting_secret_key:
        return cfg.remoting_access_key, cfg.remoting_secret_key
    return None, None


def client_home(cfg: Config) -> Path:
    """Where the sample clients keep their logs (`<data dir>/rocketmq/client`)."""
    home = cfg.data_dir / "rocketmq" / "client"
    home.mkdir(parents=True, exist_ok=True)
    return home


def run_example(main: str, args: list[str], addr: str, cfg: Config) -> int:
    """One of rocketmq-example's programs in this process's place (exec: Ctrl-C and the exit code
    are the program's own), NAMESRV_ADDR set as RocketMQ's samples read it."""
    home = client_home(cfg)
    argv = rmq.java(main, *args, home=home, logback="rmq.client.logback.xml", heap="192m",
                    props={"rocketmq.client.logRoot": str(home / "logs")}, line=LINE)
    print(f"rocketmq: {main} (RocketMQ {rmq.version(LINE)}), NameServer {addr}, client logs in {home / 'logs'}",
          file=sys.stderr, flush=True)
    os.chdir(home)
    os.execvpe(argv[0], argv, {**os.environ, "NAMESRV_ADDR": addr})
    return 0  # not reached


def mqadmin(args: list[str], line: str, cfg: Config) -> int:
    """mqadmin (MQAdminStartup, what RocketMQ's `bin/mqadmin` runs) with `args`; it signs with the
    system's key pair when one is set (`${ROCKETMQ_HOME}/conf/tools.yml`, in a scratch home)."""
    home = Path(tempfile.mkdtemp(prefix="rmq-mqadmin-"))
    try:
        access_key, secret_key = key_pair(cfg)
        if access_key and secret_key:
            (home / "conf").mkdir()
            (home / "conf" / "tools.yml").write_text(f"accessKey: {access_key}\nsecretKey: {secret_key}\n")
        argv = rmq.java("org.apache.rocketmq.tools.command.MQAdminStartup", *args, home=home,
                        logback="rmq.tools.logback.xml", line=line)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the JVM, which ends; then we clean up
        return subprocess.run(argv, cwd=home).returncode
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _registered(namesrv: str, broker_addr: str) -> bool:
    """The NameServer lists the broker's address (GET_BROKER_CLUSTER_INFO, what mqadmin clusterList asks)."""
    from remoting import codes
    from remoting.client import RemotingClient
    try:
        with RemotingClient(namesrv.split(";")[0], timeout_s=5) as c:
            answer = c.call(codes.GET_BROKER_CLUSTER_INFO)
    except OSError:
        return False
    return answer.code == codes.SUCCESS and f'"{broker_addr}"'.encode() in answer.body


def broker(args: argparse.Namespace, addr: str, cfg: Config) -> int:
    """A broker in the foreground: started, seen registered, then kept until SIGINT/SIGTERM/SIGHUP,
    when it is stopped with SIGTERM (RocketMQ's shutdown hook unregisters it) and its home removed."""
    access_key, secret_key = key_pair(cfg)
    stopping: list[int] = []

    def stop(signum: int, _frame: FrameType | None) -> None:
        stopping.append(signum)

    # from here a signal is noted, not raised: a broker being started is stopped once it is up
    # (a start takes up to --timeout), never left running without this process
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)

    def start(port: int | None) -> rmq.JavaProcess:
        return rmq.start_broker(addr, cluster=args.cluster, broker_name=args.name, port=port, access_key=access_key,
                                secret_key=secret_key, timeout_s=args.timeout, line=args.line)

    port = args.port
    if port == 0 and all(port_is_free(p) for p in (BROKER_PORT - 2, BROKER_PORT, BROKER_PORT + 1)):
        port = BROKER_PORT
    print(f"rocketmq: starting broker {args.name} of {args.cluster} (RocketMQ {rmq.version(args.line)}), "
          f"NameServer {addr}", file=sys.stderr, flush=True)
    try:
        try:
            proc = start(port or None)
        except RuntimeError as exc:
            if port != BROKER_PORT or args.port or "Address already in use" not in str(exc):
                raise
            proc = start(None)  # 10911 was taken meanwhile: free ports
    except (RuntimeError, TimeoutError) as exc:
        print(f"rocketmq: the broker did not start: {exc}", file=sys.stderr)
        return 1
    try:
        banner = next((line for line in proc.log_text().splitlines() if "boot success" in line), "")
        print(banner, flush=True)
        deadline = time.monotonic() + args.timeout
        while not stopping and proc.alive() and not _registered(addr, proc.addr):
            if time.monotonic() > deadline:
                print(f"rocketmq: the NameServer at {addr} does not list the broker after {args.timeout:.0f} s "
                      f"(see {proc.log_path} and {proc.home}/logs/rocketmqlogs/broker.log; this system's remoting "
                      "front logs a refused registration with its reason: the broker's address outside "
                      "NAMESRV_REMOTING_BROKER_NETWORKS, or a missing or wrong signature)", file=sys.stderr)
                return 1
            time.sleep(0.5)
        if proc.alive() and not stopping:
            print(f"rocketmq: broker {args.name} on {proc.addr} (pid {proc.proc.pid}) is registered with the "
                  f"NameServer at {addr}; its store and logs are in {proc.home} (removed when it stops); "
                  "Ctrl-C stops it", flush=True)
        while not stopping and proc.alive():
            time.sleep(0.2)
        if not proc.alive():
            print(f"rocketmq: the broker exited with {proc.proc.returncode}:\n{proc.log_text()[-3000:]}", file=sys.stderr)
            return 1
        print("rocketmq: stopping the broker (on its way out it unregisters from its NameServer)", file=sys.stderr, flush=True)
        return 0
    finally:
        proc.cleanup(graceful=True)


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser("./run.sh rocketmq", __doc__.split("\n\n")[0])
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "\n\n".join(__doc__.split("\n\n")[1:])
    sub = parser.add_subparsers(dest="command", required=True, metavar="{broker,producer,consumer,mqadmin,example}")
    namesrv_help = "NameServer address(es), ';'-separated (default: $NAMESRV_ADDR, else 127.0.0.1:NAMESRV_REMOTING_PORT)"

    b = sub.add_parser("broker", help="a RocketMQ broker registered with the NameServer, until Ctrl-C",
                       description="A RocketMQ broker (BrokerStartup) on 127.0.0.1 with small stores, a master "
                                   "(brokerId 0) creating topics on first use (autoCreateTopicEnable), registered with "
                                   "the NameServer; prints a line once the NameServer lists it; Ctrl-C stops it (it "
                                   "unregisters) and removes its scratch home (store and logs). With "
                                   "NAMESRV_REMOTING_ACCESS_KEY and NAMESRV_REMOTING_SECRET_KEY set it signs its "
                                   "NameServer requests with them (5.3 and 5.5).")
    b.add_argument("-n", "--namesrv", help=namesrv_help)
    b.add_argument("--name", default="broker-a", help="brokerName (default: %(default)s)")
    b.add_argument("--cluster", default="DefaultCluster", help="brokerClusterName (default: %(default)s)")
    b.add_argument("--port", type=int, default=0,
                   help=f"listenPort; its HA port is port+1 and its fast port port-2 (default: {BROKER_PORT} when "
                        "those three are free, else free ports)")
    b.add_argument("--line", choices=list(rmq.LINES), default=LINE, help="RocketMQ release line (default: %(default)s)")
    b.add_argument("--timeout", type=float, default=120.0,
                   help="seconds to wait for the broker to start, and then to be listed (default: %(default)s)")

    for name, main_class, what in (("producer", PRODUCER, "sends 1,000 messages to TopicTest and prints each SendResult"),
                                   ("consumer", CONSUMER, "receives TopicTest's messages (from the first offset) and "
                                                          "prints each, until Ctrl-C")):
        p = sub.add_parser(name, help=f"RocketMQ's quickstart {name.capitalize()}: {what}",
                           description=f"{main_class} from rocketmq-example {rmq.version(LINE)}: {what}. Its client "
                                       "logs go to <NAMESRV_DATA_DIR>/rocketmq/client/logs.")
        p.add_argument("-n", "--namesrv", help=namesrv_help)

    e = sub.add_parser("example", help="any program of rocketmq-example (tools.sh <class> in a RocketMQ distribution)",
                       description=f"Runs a class of rocketmq-example {rmq.version(LINE)} with its arguments, "
                                   "NAMESRV_ADDR set, as RocketMQ's `bin/tools.sh <class>` does.")
    e.add_argument("-n", "--namesrv", help=namesrv_help)
    e.add_argument("main_class", metavar="CLASS", help=f"e.g. {EXAMPLES}.simple.AsyncProducer")
    e.add_argument("args", nargs=argparse.REMAINDER, help="the program's arguments")

    m = sub.add_parser("mqadmin", help="RocketMQ's mqadmin (./run.sh rocketmq mqadmin for its command list)",
                       description="RocketMQ's mqadmin (MQAdminStartup, what `bin/mqadmin` runs), e.g. "
                                   "`./run.sh rocketmq mqadmin topicRoute -t TopicTest -n 127.0.0.1:9876`; without "
                                   "-n it asks $NAMESRV_ADDR. With NAMESRV_REMOTING_ACCESS_KEY and "
                                   "NAMESRV_REMOTING_SECRET_KEY set it signs with them (a scratch "
                                   "${ROCKETMQ_HOME}/conf/tools.yml), as admin writes to this system must be.")
    m.add_argument("--line", choices=list(rmq.LINES), default=LINE, help="RocketMQ release line (default: %(default)s)")
    m.add_argument("args", nargs=argparse.REMAINDER, help="mqadmin's command and its options")

    args = parser.parse_args(argv)
    cfg = load_config()
    try:
        if args.command == "broker":
            return broker(args, namesrv_addr(args.namesrv, cfg), cfg)
        if args.command == "mqadmin":
            return mqadmin(args.args, args.line, cfg)
        main_class = {"producer": PRODUCER, "consumer": CONSUMER}.get(args.command) or args.main_class
        return run_example(main_class, getattr(args, "args", []), namesrv_addr(args.namesrv, cfg), cfg)
    except jvm.JarsMissing as exc:
        print(f"rocketmq: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
