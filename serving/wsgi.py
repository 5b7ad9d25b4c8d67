"""`serving.wsgi:application_factory`, the app factory WSGI servers load (granian in
`python -m serving`; gunicorn or uWSGI work the same way): configuration is read here, once,
from the environment, in the worker process that serves."""

from __future__ import annotations

from flask import Flask

from conf import load_config
from conf.logs import setup_logging
from serving.app import create_app


def application_factory() -> Flask:
    cfg = load_config()
    setup_logging(cfg.log_format)
    return create_app(cfg)
