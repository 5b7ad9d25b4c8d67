"""`python -m serving`: the HTTP server (granian, WSGI) on NAMESRV_HTTP_HOST:NAMESRV_HTTP_PORT.

granian was chosen by measurement (see BENCHMARKS.md): its HTTP handling is Rust, and one
worker process with NAMESRV_HTTP_THREADS Python threads shares one in-memory snapshot. The
app is built in the worker by `serving.wsgi.application_factory`, which reads the same
configuration, starts the app (`serving.lifecycle`: the first refresh, then the refresher
thread) before the worker takes a request, and stops it when the worker exits; this entry point
only validates the configuration first, so a bad value fails here, once.
"""

from __future__ import annotations

import logging
import sys

from conf import load_config
from conf.logs import setup_logging
from conf.version import argument_parser


def main(argv: list[str] | None = None) -> int:
    argument_parser("namesrv-server", "The HTTP server (granian) over the Delta warehouse.").parse_args(argv)
    cfg = load_config()
    setup_logging(cfg.log_format)
    from granian import Granian
    from granian.constants import Interfaces
    from granian.log import LogLevels
    logging.getLogger("namesrv.http").info("serving %s on http://%s:%d (granian, %d threads)", cfg.warehouse,
                                           cfg.http_host, cfg.http_port, cfg.http_threads)
    Granian("serving.wsgi:application_factory", factory=True, interface=Interfaces.WSGI, address=cfg.http_host,
            port=cfg.http_port, workers=1, blocking_threads=cfg.http_threads, backlog=1024,
            log_level=LogLevels.warning, log_access=False).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
