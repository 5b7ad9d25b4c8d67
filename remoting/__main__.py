"""`python -m remoting`: the RocketMQ remoting front on NAMESRV_REMOTING_HOST:NAMESRV_REMOTING_PORT.

Its own SnapshotStore over the host's shared cut file (refreshed on a background thread, as in
the HTTP server; `snapshots.cutbuilder.serving_store`) and its own Kafka producer; started and
supervised by the launcher beside the HTTP server and the host's cut builder. With
NAMESRV_REMOTING_PROCESSES=N > 1 this process supervises N such fronts on the one port, forked
from it after the imports (`remoting.processes`).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import signal
import sys
from collections.abc import Callable

from conf import Config, heapdump, load_config
from conf.imports import refuse_pandas
from conf.logs import setup_logging
from conf.version import argument_parser
from remoting import acl, codes, processes
from remoting.front import WRITES_IN_FLIGHT, Front
from schemas.metrics import RemotingMetrics, SnapshotMetrics
from snapshots.store import SnapshotStore

log = logging.getLogger("namesrv.remoting")
# A write to an unreachable Kafka fails after this long: under mqadmin's 5 s request timeout.
PUBLISH_CONNECT_TIMEOUT_MS = 3000
MIN_SOCKET_RCVBUF = 4096
# What a front imports as it starts, beyond this module's imports (`preload`).
PRELOADED = ("eventlog.journal", "eventlog.publisher", "snapshots.cutbuilder", "snapshots.mapped")


def configuration_problem(cfg: Config) -> str | None:
    """What makes the remoting settings unusable, named by variable (None: they are fine)."""
    try:
        acl.parse_networks(cfg.remoting_broker_networks)
    except ValueError as exc:
        return f"NAMESRV_REMOTING_BROKER_NETWORKS: {exc}"
    if bool(cfg.remoting_access_key) != bool(cfg.remoting_secret_key):
        return "NAMESRV_REMOTING_ACCESS_KEY and NAMESRV_REMOTING_SECRET_KEY must be set together (or neither)"
    if 0 < cfg.remoting_socket_rcvbuf < MIN_SOCKET_RCVBUF:
        return (f"NAMESRV_REMOTING_SOCKET_RCVBUF={cfg.remoting_socket_rcvbuf}: 0 (the kernel's autotuning) or at least "
                f"{MIN_SOCKET_RCVBUF} bytes (a route lookup's request and more)")
    return None


def build_front(cfg: Config, *, store: SnapshotStore | None = None, process: int | None = None) -> Front:
    """The front over `store`, or over its own store of the host's cut file refreshed on a thread;
    `process`: which of the port's NAMESRV_REMOTING_PROCESSES it is (its metrics file, its share
    of the host's writes in flight), None when it is the port's only one."""
    from eventlog.journal import AdminJournal
    from eventlog.publisher import EventPublisher
    metrics = RemotingMetrics(codes.REQUEST_CODES)
    if store is None:
        from snapshots.cutbuilder import serving_store
        store = serving_store(cfg, metrics=SnapshotMetrics(metrics.registry, prefix="namesrv_remoting_snapshot"))
        store.refresh()
        store.start()
    journal = AdminJournal(cfg.warehouse)
    in_flight, role = (WRITES_IN_FLIGHT, None) if process is None else \
        (processes.share(WRITES_IN_FLIGHT, cfg.remoting_processes), processes.child_role(cfg.remoting_port, process))
    return Front(cfg, store, lambda: EventPublisher(cfg.bootstrap, cfg.kafka_topic, max_message_bytes=cfg.max_message_bytes,
                                                    connect_timeout_ms=PUBLISH_CONNECT_TIMEOUT_MS, journal=journal),
                 metrics=metrics, writes_in_flight=in_flight, metrics_role=role)


async def run(cfg: Config, *, process: int | None = None, listening: Callable[[], None] | None = None) -> None:
    """Serve until SIGTERM/SIGINT; `process`, `listening`: as one of several front processes
    (`remoting.processes`), told once the socket is bound."""
    front = build_front(cfg, process=process)
    server = await front.serve(cfg.remoting_host, cfg.remoting_port, reuse_port=process is not None)
    log.info("remoting front on %s:%d (RocketMQ protocol), warehouse %s, events to %s", cfg.remoting_host,
             cfg.remoting_port, cfg.warehouse, cfg.bootstrap)
    if listening is not None:
        listening()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("stopping the remoting front")
    server.close()
    await front.shutdown()
    front.store.stop()


def main(argv: list[str] | None = None) -> int:
    argument_parser("namesrv-remoting", "The RocketMQ remoting front (TCP) over the Delta warehouse.").parse_args(argv)
    cfg = load_config()
    setup_logging(cfg.log_format)
    refuse_pandas(log)
    heapdump.install("remoting", cfg.log_dir)  # off unless NAMESRV_TRACEMALLOC asks (a profiling run)
    if cfg.remoting_port == 0:
        log.error("NAMESRV_REMOTING_PORT=0 turns the remoting front off; nothing to run")
        return 2
    problem = configuration_problem(cfg)
    if problem is not None:
        log.error("%s", problem)
        return 2
    import uvloop  # the front's event loop (pyproject.toml says why)
    if cfg.remoting_processes == 1:
        uvloop.run(run(cfg))
        return 0
    return supervise(cfg)


def supervise(cfg: Config) -> int:
    """N front processes on the one port, forked from this one once it has imported what they
    run (`remoting.processes`); the exit code."""
    import uvloop
    where = f"{cfg.remoting_host}:{cfg.remoting_port}"
    if processes.port_in_use(cfg.remoting_host, cfg.remoting_port):
        log.error("%s is in use: its front processes bind it with SO_REUSEPORT, which would share it with "
                  "whatever listens there (set NAMESRV_REMOTING_PORT)", where)
        return 1
    preload()

    def body(index: int, listening: Callable[[], None]) -> int:
        uvloop.run(run(cfg, process=index, listening=listening))
        return 0

    log.info("remoting front on %s: starting %d processes", where, cfg.remoting_processes)
    supervisor = processes.Supervisor(cfg.remoting_processes, body,
                                      processes.MetricsFiles(cfg.data_dir, cfg.remoting_port, cfg.remoting_processes),
                                      where=where)
    code = supervisor.run()
    log.info("remoting front on %s stopped", where)
    return code


def preload() -> None:
    """Import what a front imports when it starts (`build_front`'s and the cut store's modules,
    and what pyarrow imports at its first table: numpy; not pandas, which `main` refused,
    `conf.imports`), so the children forked after this share them rather than each importing
    its own."""
    for module in PRELOADED:
        importlib.import_module(module)
    from routeinfo.snapshot import Snapshot
    Snapshot.empty()  # a store's first cut (nothing opened, no thread): pyarrow's lazy imports


if __name__ == "__main__":
    sys.exit(main())
