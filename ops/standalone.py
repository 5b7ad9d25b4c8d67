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

    def __enter__(self) -> StandaloneCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_cluster(work_dir: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g",
                  timeout_s: float = 90.0) -> StandaloneCluster:
    """Start a master and `workers` workers on 127.0.0.1 and wait until every worker registered.

    SPARK_WORKER_DIR (executor sandboxes, their logs) is `work_dir`/worker-i; process logs go to
    `work_dir`/*.log. Web UIs get ephemeral ports (nothing fixed to collide with)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    spark_class = str(spark_home() / "bin" / "spark-class")
    env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_NO_DAEMONIZE": "1"}
    port = free_port()
    cluster = StandaloneCluster(f"spark://127.0.0.1:{port}", work_dir)
    master_log = work_dir / "master.log"

    def spawn(args: list[str], log: Path, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        with open(log, "ab") as out:
            p = subprocess.Popen([spark_class, *args], stdout=out, stderr=subprocess.STDOUT,
                                 env={**env, **(extra_env or {})}, start_new_session=True)
        cluster.procs.append(p)
        return p

    try:
        spawn(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
               "--webui-port", str(free_port())], master_log)
        wait_for_port(port, timeout_s)
        for i in range(workers):
            wdir = work_dir / f"worker-{i}"
            wdir.mkdir(exist_ok=True)
            spawn(["org.apache.spark.deploy.worker.Worker", cluster.master_url, "--host", "127.0.0.1",
                   "--cores", str(cores), "--memory", memory, "--work-dir", str(wdir),
                   "--webui-port", str(free_port())], work_dir / f"worker-{i}.log",
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
