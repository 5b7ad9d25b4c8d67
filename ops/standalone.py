"""A Spark standalone cluster on this machine (a master and N workers, from the pyspark install).

The job does not need it: `local[N]` is the default. It exists so that tests and benchmarks
prove the job runs unchanged on a real distributed engine (separate master, worker and
executor JVMs, code shipped to executors), and so a user can try that without a Spark
distribution: `python -m ops.standalone --workers 2` prints the master URL to set as
NAMESRV_SPARK_MASTER.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ops.net import free_port, wait_for_port
from ops.netbed import Host


def spark_home() -> Path:
    import pyspark
    return Path(pyspark.__file__).resolve().parent


@dataclass
class StandaloneCluster:
    """Master and workers as child processes (own process groups), stopped by `stop`."""

    master_url: str
    work_dir: Path
    procs: list[subprocess.Popen] = field(default_factory=list)

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 15
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=5)

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker `index` with its executors and their Python workers (one process group)."""
        proc = self.procs[1 + index]
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)

    def __enter__(self) -> StandaloneCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_cluster(work_dir: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g",
                  timeout_s: float = 90.0, master_host: Host | None = None,
                  worker_hosts: list[Host] | None = None) -> StandaloneCluster:
    """Start a master and `workers` workers on 127.0.0.1 and wait until every worker registered;
    or, given `master_host` and `worker_hosts` (ops/netbed.py), each on its own host of the bed,
    bound to the host's address (master port 7077).

    SPARK_WORKER_DIR (executor sandboxes, their logs) is `work_dir`/worker-i; process logs go to
    `work_dir`/*.log. On this machine web UIs get ephemeral ports (nothing fixed to collide with)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    spark_class = str(spark_home() / "bin" / "spark-class")
    env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_NO_DAEMONIZE": "1"}
    bed = master_host is not None
    hosts = worker_hosts or []
    if bed and len(hosts) != workers:
        raise ValueError(f"{workers} workers need {workers} worker hosts, not {len(hosts)}")
    master_addr = master_host.addr if master_host is not None else "127.0.0.1"
    port = 7077 if bed else free_port()
    cluster = StandaloneCluster(f"spark://{master_addr}:{port}", work_dir)
    master_log = work_dir / "master.log"

    def spawn(args: list[str], log: Path, host: Host | None, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        argv = [spark_class, *args] if host is None else host.argv([spark_class, *args])
        local = {} if host is None else {"SPARK_LOCAL_IP": host.addr}
        with open(log, "ab") as out:
            p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                 env={**env, **local, **(extra_env or {})}, start_new_session=True)
        cluster.procs.append(p)
        return p

    try:
        spawn(["org.apache.spark.deploy.master.Master", "--host", master_addr, "--port", str(port),
               "--webui-port", str(8080 if bed else free_port())], master_log, master_host)
        wait_for_port(port, timeout_s, host=master_addr)
        for i in range(workers):
            wdir = work_dir / f"worker-{i}"
            wdir.mkdir(exist_ok=True)
            host = hosts[i] if bed else None
            spawn(["org.apache.spark.deploy.worker.Worker", cluster.master_url,
                   "--host", host.addr if host is not None else "127.0.0.1",
                   "--cores", str(cores), "--memory", memory, "--work-dir", str(wdir),
                   "--webui-port", str(8081 if bed else free_port())], work_dir / f"worker-{i}.log", host,
                  {"SPARK_WORKER_DIR": str(wdir)})
        _wait_registered(master_log, workers, timeout_s, cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait_registered(master_log: Path, workers: int, timeout_s: float, cluster: StandaloneCluster) -> None:
    deadline = time.monotonic() + timeout_s
    seen = 0
    while time.monotonic() < deadline:
        dead = [p for p in cluster.procs if p.poll() is not None]
        if dead:
            raise RuntimeError(f"a Spark standalone process exited ({dead[0].returncode}); see {cluster.work_dir}/*.log")
        seen = len(re.findall(r"Registering worker", master_log.read_text(errors="replace")))
        if seen >= workers:
            return
        time.sleep(0.3)
    raise TimeoutError(f"{seen} of {workers} workers registered with {cluster.master_url} after {timeout_s:.0f} s; "
                       f"see {master_log}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ops.standalone", description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--cores", type=int, default=1, help="cores per worker")
    p.add_argument("--memory", default="1g", help="memory per worker")
    p.add_argument("--work-dir", type=Path, default=Path("data/standalone"))
    args = p.parse_args(argv)
    cluster = start_cluster(args.work_dir.resolve(), workers=args.workers, cores=args.cores, memory=args.memory)
    print(f"master {cluster.master_url} with {args.workers} worker(s); logs in {cluster.work_dir}\n"
          f"run the job on it: NAMESRV_SPARK_MASTER={cluster.master_url} ./run.sh   (Ctrl-C stops the cluster)",
          flush=True)
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    try:
        while not stop[0] and all(p.poll() is None for p in cluster.procs):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
