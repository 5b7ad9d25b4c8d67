"""`python -m remoting`: the RocketMQ remoting front on NAMESRV_REMOTING_HOST:NAMESRV_REMOTING_PORT.

Its own SnapshotStore (refreshed on a background thread, as in the HTTP server) and its own
Kafka producer; started and supervised by the launcher beside the HTTP server.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from conf import Config, load_config
from conf.logs import setup_logging
from conf.version import argument_parser
from remoting.front import Front

log = logging.getLogger("namesrv.remoting")


def build_front(cfg: Config, *, start_refresher: bool = True) -> Front:
    from eventlog.publisher import EventPublisher
    from serving.snapshot_store import SnapshotReader, SnapshotStore
    store = SnapshotStore(SnapshotReader(cfg.warehouse), cfg.refresh_interval_ms / 1000,
                          retention_ms=cfg.history_retention_ms)
    store.refresh()
    if start_refresher:
        store.start()
    return Front(cfg, store, lambda: EventPublisher(cfg.bootstrap, cfg.kafka_topic,
                                                    max_message_bytes=cfg.max_message_bytes))


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
    setup_logging()
    if cfg.remoting_port == 0:
        log.error("NAMESRV_REMOTING_PORT=0 turns the remoting front off; nothing to run")
        return 2
    asyncio.run(run(cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
