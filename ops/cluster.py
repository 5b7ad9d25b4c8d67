"""`./run.sh cluster up|down|status`: the multi-host bed for a person to try, and its picture.

`up` makes the hosts (ops/netbed.py) and starts the deployment on them: a three-broker Kafka
cluster, HDFS (a NameNode and two DataNodes), the job on one host and its standby on another, and
two serving replicas (HTTP and the remoting front) on hosts of their own, the tables, checkpoint
and leases on HDFS (ops/programs.py starts our programs as the multi-host tests do). It records
the hosts and the process ids in `<data dir>/cluster.json` and returns once both replicas answer,
leaving everything running. `status` prints the hosts, what runs where and whether it is up;
`down` stops it all and removes the hosts.

`TOPOLOGY` is the one description of the bed: `up` builds it, the tests use its host names, and
`draw()` renders docs/deploy-topology.png from it, with the description embedded in the PNG so a
test can tell a stale picture (tests/project/test_deploy_picture.py).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from conf import load_config
from conf.version import argument_parser

# host -> (role shown in the picture and by status, group); the order gives the addresses
TOPOLOGY: dict[str, tuple[str, str]] = {
    "kafka-1": ("Kafka broker + KRaft controller", "event log"),
    "kafka-2": ("Kafka broker + KRaft controller", "event log"),
    "kafka-3": ("Kafka broker + KRaft controller", "event log"),
    "namenode": ("HDFS NameNode", "store"),
    "datanode-1": ("HDFS DataNode", "store"),
    "datanode-2": ("HDFS DataNode", "store"),
    "spark-master": ("Spark master (standalone)", "Spark"),
    "worker-1": ("Spark worker (executors)", "Spark"),
    "worker-2": ("Spark worker (executors)", "Spark"),
    "driver-a": ("the job (Spark driver)", "job"),
    "driver-b": ("the job's standby", "job"),
    "serve-1": ("HTTP + remoting front", "serving"),
    "serve-2": ("HTTP + remoting front", "serving"),
}
KAFKA = [h for h, (_, group) in TOPOLOGY.items() if group == "event log"]
SERVING = [h for h, (_, group) in TOPOLOGY.items() if group == "serving"]
TAG = "c"  # the bed's tag: its namespaces are nsrv-c-<i>
PICTURE = Path(__file__).resolve().parents[1] / "docs" / "deploy-topology.png"


def _state_path() -> Path:
    return load_config().data_dir / "cluster.json"


def up() -> int:
    from ops import netbed
    from ops.apache_kafka import start_cluster
    from ops.hdfs import start_hdfs
    from ops.programs import Site, wait_ready
    from ops.standalone import start_cluster as start_standalone
    if _state_path().exists():
        print(f"cluster: already up ({_state_path()}); `./run.sh cluster down` first", file=sys.stderr)
        return 1
    bed = netbed.Bed(list(TOPOLOGY), TAG).up()
    pids: dict[str, list[int]] = {}
    work_dirs: list[str] = []
    try:
        kafka = start_cluster([bed.hosts[h] for h in KAFKA])
        work_dirs.append(str(kafka.work_dir))
        pids.update({k: [p.pid] for k, p in kafka.nodes.items()})
        fs = start_hdfs(bed.hosts["namenode"], [bed.hosts["datanode-1"], bed.hosts["datanode-2"]])
        work_dirs.append(str(fs.work_dir))
        pids.update({k: [p.pid] for k, p in fs.procs.items()})
        print(f"cluster: Kafka {kafka.bootstrap} and HDFS {fs.url} are up; starting Spark, the job, its standby "
              "and two serving replicas (a few minutes)", flush=True)
        spark = start_standalone(load_config().data_dir / "cluster-spark", workers=2, cores=2, memory="2g",
                                 master_host=bed.hosts["spark-master"],
                                 worker_hosts=[bed.hosts["worker-1"], bed.hosts["worker-2"]])
        work_dirs.append(str(spark.work_dir))
        pids.update({h: [p.pid] for h, p in zip(("spark-master", "worker-1", "worker-2"), spark.procs, strict=True)})
        site = Site(kafka.bootstrap, f"{fs.url}/namesrv", load_config().data_dir / "cluster-hosts",
                    {"NAMESRV_SPARK_MASTER": spark.master_url})
        work_dirs.append(str(site.work_dir))
        for host in ("driver-a", "driver-b"):
            pids[host] = [site.start("job", bed.hosts[host]).proc.pid]
        for host in SERVING:
            pids[host] = [site.start("serving", bed.hosts[host]).proc.pid]
        for host in SERVING:
            wait_ready(bed.hosts[host], 600)
    except BaseException:
        _kill([pid for group in pids.values() for pid in group])
        bed.down()
        raise
    state = {"hosts": {h.name: h.addr for h in bed.hosts.values()}, "pids": pids, "work_dirs": work_dirs,
             "kafka": kafka.bootstrap, "hdfs": fs.url, "store": site.store_uri}
    _state_path().parent.mkdir(parents=True, exist_ok=True)
    _state_path().write_text(json.dumps(state, indent=2))
    return status()


def status() -> int:
    from ops import netbed
    from ops.programs import HTTP_PORT, REMOTING_PORT
    if not _state_path().exists():
        print("cluster: down (`./run.sh cluster up` makes it)")
        return 0
    state = json.loads(_state_path().read_text())
    live = set(netbed.namespaces())
    print(f"cluster: Kafka bootstrap {state['kafka']}; store {state['store']}")
    for i, (name, addr) in enumerate(state["hosts"].items()):
        pids = state["pids"].get(name, [])
        running = bool(pids) and all(_alive(pid) for pid in pids)
        print(f"  {name:<12} {addr:<12} {TOPOLOGY.get(name, ('?', ''))[0]:<32} "
              f"{'running' if running else 'STOPPED'}{'' if f'{netbed.NETNS_PREFIX}{TAG}-{i}' in live else ', no host'}")
    for name in SERVING:
        addr = state["hosts"][name]
        print(f"  {name}: http://{addr}:{HTTP_PORT}/cluster, namesrvAddr {addr}:{REMOTING_PORT}")
    print(f"  logs: {load_config().data_dir / 'cluster-hosts'}/<host>/logs/")
    return 0


def down() -> int:
    import shutil

    from ops import netbed
    if _state_path().exists():
        state = json.loads(_state_path().read_text())
        _kill([pid for group in state["pids"].values() for pid in group])
        for d in state["work_dirs"]:
            shutil.rmtree(d, ignore_errors=True)
        _state_path().unlink()
    netbed.Bed(list(TOPOLOGY), TAG).down()
    print("cluster: down")
    return 0


def _kill(pids: list[int]) -> None:
    from ops.procs import kill_tree
    for pid in pids:
        kill_tree(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def description() -> str:
    """The bed as the picture shows it (embedded in the PNG; a test compares)."""
    return json.dumps({"subnet": "10.77.0.0/24", "hosts": {h: role for h, (role, _) in TOPOLOGY.items()}},
                      sort_keys=True)


def draw(path: Path = PICTURE) -> Path:
    """The topology as a PNG: hosts by group on the bridge, each with its address and role."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle
    groups: dict[str, list[str]] = {}
    for host, (_, group) in TOPOLOGY.items():
        groups.setdefault(group, []).append(host)
    rows: list[list[str]] = [[], []]  # groups above the bridge, below it
    for gi, group in enumerate(groups):
        rows[gi % 2].append(group)
    width = max(sum(len(groups[g]) for g in row) * 1.45 + 0.3 * (len(row) - 1) for row in rows) + 1.0
    fig, ax = plt.subplots(figsize=(0.9 * width, 4.2))
    ax.set_xlim(0, width)
    ax.set_ylim(0, 6)
    ax.axis("off")
    ax.plot([0.3, width - 0.3], [3, 3], color="#555", linewidth=3)
    ax.text(width - 0.3, 3.15, "bridge 10.77.0.254 (this machine)", ha="right", fontsize=8, color="#555",
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
    ax.text(0.3, 2.65, "tables, checkpoint, leases on HDFS: hdfs://namenode:9000/namesrv", ha="left", fontsize=8,
            color="#555", bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
    colours = {"event log": "#f4c27a", "store": "#9cc7e8", "job": "#b5dfa6", "serving": "#e8b4d8", "Spark": "#f2a58e"}
    addr = {h: f"10.77.0.{i + 1}" for i, h in enumerate(TOPOLOGY)}
    for ri, row in enumerate(rows):
        y = 4.4 if ri == 0 else 0.4
        x = 1.0
        for group in row:
            hosts = groups[group]
            for host in hosts:
                ax.add_patch(Rectangle((x - 0.65, y), 1.3, 1.2, facecolor=colours.get(group, "#ddd"),
                                       edgecolor="#333"))
                ax.text(x, y + 0.85, host, ha="center", fontsize=8, weight="bold")
                ax.text(x, y + 0.55, addr[host], ha="center", fontsize=7)
                role = TOPOLOGY[host][0]
                ax.text(x, y + 0.25, role.replace(" + ", "\n+ ").replace(" (", "\n(") if len(role) > 20 else role,
                        ha="center", va="center", fontsize=6)
                ax.plot([x, x], [3, y + (0 if y > 3 else 1.2)], color="#888", linewidth=1)
                x += 1.45
            ax.text(x - 1.45 * len(hosts) / 2 - 0.7, (y + 1.45) if y > 3 else (y - 0.3), group, ha="center",
                    fontsize=9, style="italic")
            x += 0.3
    ax.set_title("The multi-host bed: one network namespace per host, veth pairs to one bridge", fontsize=10)
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Description": description()})
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser("./run.sh cluster", "The multi-host bed: hosts as network namespaces (root), with a "
                             "Kafka cluster, HDFS, the job and its standby, and two serving replicas on them.")
    parser.add_argument("action", choices=("up", "down", "status", "draw"))
    args = parser.parse_args(argv)
    if args.action == "draw":
        print(draw())
        return 0
    return {"up": up, "down": down, "status": status}[args.action]()


if __name__ == "__main__":
    raise SystemExit(main())
