"""`serving.wsgi:application_factory`, the app factory WSGI servers load (gunicorn, uWSGI; `python
-m serving` runs `serving.asgi` on granian instead): configuration is read here, once, from the
environment, in the worker process that serves. The app is started here too (its first refresh,
then its refresher thread), and stopped when that process exits.

A WSGI server holds a thread per open request, so it serves no watch stream: the watch paths
answer 501, naming the server that streams them (`python -m serving`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from multiprocessing.util import Finalize
from typing import Any

from flask import Flask

from conf import load_config
from conf.logs import setup_logging
from schemas.fields import InvalidInput
from serving import lifecycle
from serving.app import create_app
from serving.watch import watch_key

NO_WATCH = json.dumps({"code": "REQUEST_CODE_NOT_SUPPORTED",
                       "remark": "watch streams are served by `python -m serving` (granian's event loop), not under "
                                 "a WSGI server, where each would hold a thread"}, sort_keys=True).encode()


class NoWatchStreams:
    """WSGI middleware: 501 for the watch paths, everything else to the app."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        try:
            watched = watch_key(environ.get("PATH_INFO", "")) is not None
        except InvalidInput:
            watched = True
        if watched:
            start_response("501 Not Implemented", [("Content-Type", "application/json"),
                                                   ("Content-Length", str(len(NO_WATCH)))])
            return [NO_WATCH]
        return self.app(environ, start_response)


def application_factory() -> Flask:
    cfg = load_config()
    setup_logging(cfg.log_format)
    app = create_app(cfg)
    app.wsgi_app = NoWatchStreams(app.wsgi_app)  # type: ignore[method-assign]
    lifecycle.start(app)  # before the server takes a request: the first answer comes from the newest cut
    # Stopped at the worker's exit. A forked worker (gunicorn's, uWSGI's) may leave with os._exit, where
    # atexit handlers never run; multiprocessing's exit finalizers run at an ordinary interpreter exit
    # (multiprocessing registers them with atexit) and at a multiprocessing.Process's.
    Finalize(None, lifecycle.stop, args=(app,), exitpriority=10)
    return app
