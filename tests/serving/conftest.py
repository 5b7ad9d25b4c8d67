"""Fixtures of the unit tests: an app over a cut the pure core made; never started (no refresh, no thread)."""

from __future__ import annotations

import pytest
from flask import Flask

from conf import load_config
from serving.app import create_app
from serving.context import EXTENSION
from tests.helpers import cut, reg


@pytest.fixture
def app(tmp_path) -> Flask:
    app = create_app(load_config({"NAMESRV_DATA_DIR": str(tmp_path)}))
    app.extensions[EXTENSION].current = cut(reg("broker-a", 0, "10.0.0.1:1"), reg("broker-b", 0, "10.0.0.2:1"))
    return app
