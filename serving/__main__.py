"""`python -m serving`: the HTTP server (granian) on NAMESRV_HTTP_HOST:NAMESRV_HTTP_PORT.

granian was chosen by measurement (see BENCHMARKS.md): its HTTP handling is Rust, and one
worker process shares one in-memory snapshot. The worker runs an event loop (granian's RSGI
interface) that answers route lookups and holds the watch streams itself, and hands every other
request to the Flask app on NAMESRV_HTTP_THREADS threads (`serving.asgi`, which says why). The
app is built in the worker by `serving.asgi.application_factory`, which reads the same
configuration, starts the app (`serving.lifecycle`: the first refresh, then the refresher
thread) before the worker takes a request, and stops it when the worker exits; this entry point
only validates the configuration first, so a bad value fails here, once.

Every open connection, watch streams included, counts against granian's backpressure (its
limit of connections per worker) and takes a file descriptor: the limit is set to
NAMESRV_HTTP_MAX_WATCHERS plus the backlog of ordinary connections, and the process's open-file
limit raised to its hard limit (a warning says when that is too low for so many streams).
"""

from __future__ import annotations

import logging
import resource
import sys

from conf import load_config
from conf.logs import setup_logging
from conf.version import argument_parser

BACKLOG = 1024  # connections waiting to be accepted; also the room left for ordinary ones beside the streams
SPARE_FILES = 256  # descriptors the process needs besides its connections (Delta, logs, the cut file)
log = logging.getLogger("namesrv.http")


def raise_file_limit(connections: int) -> int:
    """Raise the soft open-file limit to the hard one (inherited by granian's worker); returns it.
    Warns when it cannot hold `connections` connections and the process's own files."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d: %s", soft, exc)
    if soft != resource.RLIM_INFINITY and soft < connections + SPARE_FILES:
        log.warning("the open-file limit (%d) holds fewer than NAMESRV_HTTP_MAX_WATCHERS plus %d ordinary "
                    "connections (%d): raise it (ulimit -n, LimitNOFILE=) or lower NAMESRV_HTTP_MAX_WATCHERS",
                    soft, BACKLOG, connections + SPARE_FILES)
    return soft


def main(argv: list[str] | None = None) -> int:
    argument_parser("namesrv-server", "The HTTP server (granian) over the Delta warehouse.").parse_args(argv)
    cfg = load_config()
    setup_logging(cfg.log_format)
    from granian import Granian
    from granian.constants import Interfaces
    from granian.log import LogLevels
    connections = cfg.http_max_watchers + BACKLOG
    raise_file_limit(connections)
    log.info("serving %s on http://%s:%d (granian, an event loop and %d threads, up to %d watch streams)",
             cfg.warehouse, cfg.http_host, cfg.http_port, cfg.http_threads, cfg.http_max_watchers)
    Granian("serving.asgi:application_factory", factory=True, interface=Interfaces.RSGI, address=cfg.http_host,
            port=cfg.http_port, workers=1, backlog=BACKLOG, backpressure=connections, websockets=False,
            log_level=LogLevels.warning, log_access=False).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
