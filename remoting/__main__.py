"""`python -m remoting`: the RocketMQ remoting front on NAMESRV_REMOTING_HOST:NAMESRV_REMOTING_PORT.

Its own SnapshotStore over the host's shared cut file (refreshed on a background thread, as in
the HTTP server; `snapshots.cutbuilder.serving_store`) and its own Kafka producer; started and
supervised by the launcher beside the HTTP server and the host's cut builder.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from conf import Config, load_config
from conf.logs import setup_logging
from conf.version import argument_parser
from remoting import acl, codes
from remoting.front import Front
from schemas.metrics import RemotingMetrics, SnapshotMetrics
from snapshots.store import SnapshotStore

log = logging.getLogger("namesrv.remoting")
# A write to an unreachable Kafka fails after this long: under mqadmin's 5 s request timeout.
PUBLISH_CONNECT_TIMEOUT_MS = 3000


def configuration_problem(cfg: Config) -> str | None:
    """What makes the remoting settings unusable, named by variable (None: they are fine)."""
    try:
        acl.parse_networks(cfg.remoting_broker_networks)
    except ValueError as exc:
        return f"NAMESRV_REMOTING_BROKER_NETWORKS: {exc}"
    if bool(cfg.remoting_access_key) != bool(cfg.remoting_secret_key):
        return "NAMESRV_REMOTING_ACCESS_KEY and NAMESRV_REMOTING_SECRET_KEY must be set together (or neither)"
    return None


def build_front(cfg: Config, *, store: SnapshotStore | None = None) -> Front:
    """The front over `store`, or over its own store of the host's cut file refreshed on a thread."""
    from eventlog.journal import AdminJournal
    from eventlog.publisher import EventPublisher
    metrics = RemotingMetrics(codes.REQUEST_CODES)
    if store is None:
        from snapshots.cutbuilder import serving_store
        store = serving_store(cfg, metrics=SnapshotMetrics(metrics.registry, prefix="namesrv_remoting_snapshot"))
        store.refresh()
        store.start()
    journal = AdminJournal(cfg.warehouse)
    return Front(cfg, store, lambda: EventPublisher(cfg.bootstrap, cfg.kafka_topic, max_message_bytes=cfg.max_message_bytes,
                                                    connect_timeout_ms=PUBLISH_CONNECT_TIMEOUT_MS, journal=journal),
                 metrics=metrics)


async def run(cfg: Config) -> None:
    front = build_front(cfg)
    server = await front.serve(cfg.remoting_host, cfg.remoting_port)
    log.info("remoting front on %s:%d (RocketMQ protocol), warehouse %s, events to %s", cfg.remoting_host,
             cfg.remoting_port, cfg.warehouse, cfg.bootstrap)
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
    if cfg.remoting_port == 0:
        log.error("NAMESRV_REMOTING_PORT=0 turns the remoting front off; nothing to run")
        return 2
    problem = configuration_problem(cfg)
    if problem is not None:
        log.error("%s", problem)
        return 2
    import uvloop  # the front's event loop (pyproject.toml says why)
    uvloop.run(run(cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
