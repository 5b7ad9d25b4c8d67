"""`serving.wsgi:application_factory`, the app factory WSGI servers load (granian in
`python -m serving`; gunicorn or uWSGI work the same way): configuration is read here, once,
from the environment, in the worker process that serves. The app is started here too (its
first refresh, then its refresher thread), and stopped when that process exits."""

from __future__ import annotations

from multiprocessing.util import Finalize

from flask import Flask

from conf import load_config
from conf.logs import setup_logging
from serving import lifecycle
from serving.app import create_app


def application_factory() -> Flask:
    cfg = load_config()
    setup_logging(cfg.log_format)
    app = create_app(cfg)
    lifecycle.start(app)  # before the server takes a request: the first answer comes from the newest cut
    # Stopped at the worker's exit. granian's worker is a forked multiprocessing.Process, which leaves
    # with os._exit: atexit handlers never run there. multiprocessing's exit finalizers do, and they
    # run at an ordinary interpreter exit as well (multiprocessing registers them with atexit).
    Finalize(None, lifecycle.stop, args=(app,), exitpriority=10)
    return app
