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
limit of connections per worker) and takes a file descriptor: the process's open-file limit is
raised to its hard limit, the streams are bounded by NAMESRV_HTTP_MAX_WATCHERS or by what that
limit holds beside the backlog of ordinary connections (`watch_bound`; a warning says so), and
the backpressure is that bound plus the backlog.
"""

from __future__ import annotations

import logging
import resource
import sys

from conf import load_config
from conf.imports import refuse_pandas
from conf.logs import setup_logging
from conf.version import argument_parser

BACKLOG = 1024  # connections waiting to be accepted; also the room left for ordinary ones beside the streams
SPARE_FILES = 256  # descriptors the process needs besides its connections (Delta, logs, the cut file)
log = logging.getLogger("namesrv.http")


def raise_file_limit() -> int:
    """Raise the soft open-file limit to the hard one (granian's worker inherits it); returns the
    soft limit now. Each watch stream is a connection, hence a descriptor."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d: %s", soft, exc)
    return soft


def watch_bound(configured: int, file_limit: int) -> int:
    """The watch streams one server holds: NAMESRV_HTTP_MAX_WATCHERS, or fewer when the open-file
    limit cannot hold that many beside BACKLOG ordinary connections and SPARE_FILES (a stream over
    the bound is answered 503; one over the descriptors would fail the accept itself)."""
    if file_limit == resource.RLIM_INFINITY:
        return configured
    return max(1, min(configured, file_limit - BACKLOG - SPARE_FILES))


def main(argv: list[str] | None = None) -> int:
    argument_parser("namesrv-server", "The HTTP server (granian) over the Delta warehouse.").parse_args(argv)
    cfg = load_config()
    setup_logging(cfg.log_format)
    refuse_pandas(log)  # granian's worker is forked from here: it inherits the refusal
    from granian import Granian
    from granian.constants import Interfaces
    from granian.log import LogLevels
    streams = watch_bound(cfg.http_max_watchers, raise_file_limit())  # the worker applies the same bound
    if streams < cfg.http_max_watchers:
        log.warning("the open-file limit holds %d watch streams beside %d ordinary connections, not "
                    "NAMESRV_HTTP_MAX_WATCHERS=%d: raise it (LimitNOFILE=, ulimit -n) for more", streams, BACKLOG,
                    cfg.http_max_watchers)
    connections = streams + BACKLOG
    log.info("serving %s on http://%s:%d (granian, an event loop and %d threads, up to %d watch streams)",
             cfg.warehouse, cfg.http_host, cfg.http_port, cfg.http_threads, streams)
    Granian("serving.asgi:application_factory", factory=True, interface=Interfaces.RSGI, address=cfg.http_host,
            port=cfg.http_port, workers=1, backlog=BACKLOG, backpressure=connections, websockets=False,
            log_level=LogLevels.warning, log_access=False).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
