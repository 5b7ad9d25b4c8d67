"""The admin bearer token: NAMESRV_ADMIN_TOKEN, else a file under the data directory.

`./run.sh` creates the file on first run (mode 0600) and prints its path, never the token.
"""

from __future__ import annotations

import os
import secrets

from conf import Config


def admin_token(cfg: Config, *, create: bool = False) -> str | None:
    """The token writes must present, or None when none is configured (writes are then refused)."""
    if cfg.admin_token:
        return cfg.admin_token
    path = cfg.admin_token_file
    if path.exists():
        token = path.read_text().strip()
        return token or None
    if not create:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_urlsafe(32) + "\n")
    return path.read_text().strip()
