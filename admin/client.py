"""The HTTP API as the admin CLI calls it: one session, the token on writes, errors as exceptions
that carry the exit code a shell user acts on."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import requests

# Exit codes (documented in `namesrv-admin --help` and docs/operations.md)
OK, REFUSED, USAGE, UNREACHABLE, UNAUTHORIZED = 0, 1, 2, 3, 4


class AdminError(Exception):
    """What went wrong, in words, and the process exit code for it."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ApiClient:
    def __init__(self, url: str, token: str | None, *, timeout_s: float) -> None:
        self.url, self.token, self.timeout_s = url.rstrip("/"), token, timeout_s
        self.http = requests.Session()

    def get(self, path: str, **params: Any) -> Any:
        return self._call("GET", path, params=params)

    def write(self, method: str, path: str, *, body: Any = None, **params: Any) -> Any:
        if not self.token:
            raise AdminError("no admin token: set NAMESRV_ADMIN_TOKEN or run from the directory whose data dir "
                             "holds admin-token (NAMESRV_DATA_DIR)", UNAUTHORIZED)
        return self._call(method, path, params=params, body=body, auth=True)

    def _call(self, method: str, path: str, *, params: dict[str, Any], body: Any = None, auth: bool = False) -> Any:
        headers = {"Authorization": f"Bearer {self.token}"} if auth else {}
        query = {k: v for k, v in params.items() if v is not None}
        try:
            r = self.http.request(method, self.url + path, params=query, json=body, headers=headers,
                                  timeout=self.timeout_s)
        except requests.RequestException as exc:
            raise AdminError(f"cannot reach the NameServer's HTTP API at {self.url}: {type(exc).__name__} "
                             f"(is it running? './run.sh' starts it; --url names another)", UNREACHABLE) from None
        try:
            payload = r.json()
        except ValueError:
            payload = {"remark": r.text[:200]}
        if r.status_code < 400:
            return payload
        remark = payload.get("remark", "") if isinstance(payload, dict) else ""
        code = payload.get("code", "") if isinstance(payload, dict) else ""
        message = f"{r.status_code} {code}: {remark}".strip()
        if r.status_code == 401:
            raise AdminError(message, UNAUTHORIZED)
        raise AdminError(message, UNREACHABLE if r.status_code >= 500 else REFUSED)


def seg(value: str) -> str:
    """A path segment, quoted (topics and KV keys may hold characters URLs reserve)."""
    return quote(value, safe="")
