"""`python -m serving`: the HTTP server (waitress) on NAMESRV_HTTP_HOST:NAMESRV_HTTP_PORT."""

from __future__ import annotations

import logging
import sys

from conf import load_config
from conf.logs import setup_logging
from serving.app import create_app


def main() -> int:
    cfg = load_config()
    setup_logging()
    from waitress import serve
    app = create_app(cfg)
    logging.getLogger("namesrv.http").info("serving %s on http://%s:%d", cfg.warehouse, cfg.http_host, cfg.http_port)
    serve(app, host=cfg.http_host, port=cfg.http_port, threads=cfg.http_threads, ident="namesrv",
          clear_untrusted_proxy_headers=True, max_request_body_size=1024 * 1024)
    return 0


if __name__ == "__main__":
    sys.exit(main())
