"""`serving.asgi:application_factory`: the HTTP server's asynchronous front, the app `python -m
serving` runs on granian's event-loop interface (RSGI, granian's native counterpart of ASGI).

Why not WSGI any more: a watch stream (`serving.watch`) stays open for hours, and under WSGI each
one holds one of the worker's few threads; 10,000 watchers would need 10,000 threads. Here the
event loop holds every stream (a watcher costs an open connection and a few objects), and:

- route lookups the fast path answers (`serving.fastpath.fast_route_body`) are answered in the
  loop itself, without a thread hop or Flask;
- the watch paths are served by the loop (`serving.watch.WatchHub`);
- every other request goes to the Flask app, unchanged, as a WSGI call on NAMESRV_HTTP_THREADS
  threads (`WsgiThreads`, `_call_wsgi`), its body read by the loop first.

RSGI rather than ASGI: measured on the bench's 100,000 topics with wrk (64 connections), the
ASGI message protocol cost lookups (about 11,000 a second per core of the server, against
15,000 under WSGI) where RSGI's direct calls answered more per core than WSGI did
(docs/operations.md, "Watching routes", has the figures). One HTTP port stays the public contract.

Stopping: granian's worker stops its event loop only once every connection has ended, and tells
the app only then (`__rsgi_del__`); an open watch stream never ends on its own. So SIGTERM and
SIGINT first end every watch stream (`WatchHub.close`), chained in front of granian's own
handlers (`_end_streams_on`).
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import queue
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from types import FrameType
from typing import Any

from flask import Flask

from conf import Config, heapdump, load_config
from conf.logs import setup_logging
from schemas.fields import InvalidInput
from schemas.metrics import FAST_PATH_ENDPOINT, ServerMetrics
from serving import lifecycle
from serving import metrics as server_metrics
from serving.__main__ import watch_bound
from serving.app import create_app
from serving.context import EXTENSION
from serving.fastpath import cut_headers, fast_route_body
from serving.watch import RESUME_HEADER, WatchHub, WatchKey, watch_key
from snapshots.served import ServedCuts
from snapshots.store import SnapshotStore

log = logging.getLogger("namesrv.http")
JSON = ("content-type", "application/json")
STREAM_HEADERS = [("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-cache"),
                  ("x-accel-buffering", "no")]  # nginx: pass each event on at once
BODYLESS = frozenset({"GET", "HEAD", "OPTIONS"})


def _error_body(code: str, remark: str) -> bytes:
    """An error answer as the Flask app's (`serving.errors`) is shaped."""
    return json.dumps({"code": code, "remark": remark}, sort_keys=True, separators=(",", ":")).encode() + b"\n"


class RsgiResponder:
    """A watch request's answer over granian's RSGI protocol object (`serving.watch.Responder`),
    counted by the request counter as the WSGI wrapper counts the Flask app's."""

    def __init__(self, proto: Any, count: Callable[[int], None]) -> None:
        self.proto, self.count = proto, count

    def refuse(self, status: int, code: str, remark: str, headers: Iterable[tuple[str, str]] = ()) -> None:
        self.proto.response_bytes(status, [JSON, *headers], _error_body(code, remark))
        self.count(status)

    def open(self) -> Callable[[bytes], Any]:
        transport = self.proto.response_stream(200, STREAM_HEADERS)
        self.count(200)
        send: Callable[[bytes], Any] = transport.send_bytes
        return send

    def disconnected(self) -> Any:
        return self.proto.client_disconnect()


WsgiCall = Callable[[dict[str, Any]], tuple[int, list[tuple[str, str]], bytes]]


class WsgiThreads:
    """Threads that call the WSGI app for the loop: a request is queued with a future of the
    loop's, and its answer set on that future with one `call_soon_threadsafe`. The loop's own
    `run_in_executor` chains a concurrent.futures.Future to an asyncio one, callbacks on both
    sides, which cost requests handed to Flask about a sixth of their rate (/healthz with wrk:
    2,006 a second against 2,370 this way and 2,363 under granian's WSGI threads)."""

    def __init__(self, call: WsgiCall, threads: int) -> None:
        self._call = call
        self._queue: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], dict[str, Any]] | None] \
            = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._run, name=f"http_{i}", daemon=True) for i in range(threads)]
        for t in self._threads:
            t.start()

    def call(self, environ: dict[str, Any]) -> asyncio.Future[tuple[int, list[tuple[str, str]], bytes]]:
        """The app's answer to `environ`, on the running loop."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[tuple[int, list[tuple[str, str]], bytes]] = loop.create_future()
        self._queue.put((loop, answer, environ))
        return answer

    def _run(self) -> None:
        while (job := self._queue.get()) is not None:
            loop, answer, environ = job
            try:
                settled: tuple[Any, BaseException | None] = (self._call(environ), None)
            except BaseException as exc:
                settled = (None, exc)
            try:
                loop.call_soon_threadsafe(_settle, answer, *settled)
            except RuntimeError:  # the loop closed meanwhile (the server stopped): nobody waits for it
                pass

    def stop(self) -> None:
        """End the threads once the requests queued before are answered."""
        for _ in self._threads:
            self._queue.put(None)


def _settle(answer: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if answer.done():  # the request's coroutine was cancelled (the server is stopping)
        return
    if exc is not None:
        answer.set_exception(exc)
    else:
        answer.set_result(result)


class Front:
    """The RSGI application: granian calls `__rsgi__` once per request on the worker's loop."""

    def __init__(self, app: Flask, cfg: Config, served: ServedCuts) -> None:
        self.flask = app
        self.store: SnapshotStore = app.extensions[EXTENSION]
        self.metrics: ServerMetrics = app.extensions[server_metrics.EXTENSION]
        self.wsgi = app.wsgi_app  # counted (serving.metrics.Instrumented) around the WSGI fast path and Flask
        self.max_body = int(app.config["MAX_CONTENT_LENGTH"])
        self.threads = WsgiThreads(self._call_wsgi, cfg.http_threads)
        self.history = ThreadPoolExecutor(1, thread_name_prefix="watch-history")
        # as `python -m serving` bounds its connections (the limit is the one it raised, inherited)
        streams = watch_bound(cfg.http_max_watchers, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        self.hub = WatchHub(self.store, streams, self.history)
        self.served = served
        self._fast_count = self.metrics.requests.labels(FAST_PATH_ENDPOINT, "GET", "200")
        self._fast_latency = self.metrics.latency.labels(FAST_PATH_ENDPOINT)

    # -- granian's hooks

    def __rsgi_init__(self, loop: asyncio.AbstractEventLoop) -> None:
        """At the worker's start (its loop not running yet): served cuts go to the hub, and the
        stop signals end the watch streams first."""
        self.served.attach(loop, self.hub.served)
        loop.call_soon(self.hub.start)
        _end_streams_on((signal.SIGINT, signal.SIGTERM), lambda: loop.call_soon_threadsafe(self.hub.close))

    def __rsgi_del__(self, loop: asyncio.AbstractEventLoop) -> None:
        """At the worker's exit: no stream left, the threads and the app's resources stopped."""
        self.hub.close()
        self.served.detach()
        self.threads.stop()
        self.history.shutdown(wait=False, cancel_futures=True)
        lifecycle.stop(self.flask)

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        path, method = scope.path, scope.method
        started = time.perf_counter()
        found = fast_route_body(self.store, method, path, scope.query_string)
        if found is not None:
            body, snap = found
            proto.response_bytes(200, [JSON, *cut_headers(snap, self.store)], body)
            self._fast_count.inc()
            self._fast_latency.observe(time.perf_counter() - started)
            return
        try:
            key = watch_key(path)
        except InvalidInput as exc:
            proto.response_bytes(400, [JSON, *self.hub.cut_headers()], _error_body("INVALID_PARAMETER", str(exc)))
            self._count("watch.topic_route", method, 400)
            return
        if key is not None:
            await self._watch(scope, proto, key)
        else:
            await self._bridge(scope, proto)

    # -- watch streams

    async def _watch(self, scope: Any, proto: Any, key: WatchKey) -> None:
        method = scope.method
        responder = RsgiResponder(proto, lambda status: self._count(key.endpoint, method, status))
        await self.hub.request(key, method, scope.headers.get(RESUME_HEADER), scope.query_string, responder)

    def _count(self, endpoint: str, method: str, status: int) -> None:
        self.metrics.requests.labels(endpoint, method, str(status)).inc()

    # -- everything else: the Flask app on the thread pool

    async def _bridge(self, scope: Any, proto: Any) -> None:
        environ = wsgi_environ(scope)
        try:
            environ["wsgi.input"] = io.BytesIO(await self._request_body(proto, environ))
        except Exception:  # the client went away while sending its body: nobody to answer
            return
        try:
            status, headers, body = await self.threads.call(environ)
        except Exception:
            log.exception("the WSGI app failed on %s %s", scope.method, scope.path)
            status, headers, body = 500, [JSON], _error_body("SYSTEM_ERROR", "the server failed")
        proto.response_bytes(status, headers, body)

    async def _request_body(self, proto: Any, environ: dict[str, Any]) -> bytes:
        """The request's body, read by the loop: at most MAX_CONTENT_LENGTH + 1 bytes (the app
        answers 413 beyond that), none when its declared length is already over the limit."""
        declared = environ.get("CONTENT_LENGTH")
        chunked = "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
        if not chunked and (not declared or declared == "0") and environ["REQUEST_METHOD"] in BODYLESS:
            return b""
        if declared and declared.isdigit() and int(declared) > self.max_body:
            return b""
        parts, size = [], 0
        async for chunk in proto:
            parts.append(chunk)
            size += len(chunk)
            if size > self.max_body:
                break
        return b"".join(parts)

    def _call_wsgi(self, environ: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
        """The Flask app's answer to one request (on a pool thread)."""
        started: list[tuple[str, list[tuple[str, str]]]] = []
        written: list[bytes] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
            if exc_info is not None and started:
                raise exc_info[1].with_traceback(exc_info[2])
            started[:] = [(status, headers)]
            return written.append  # PEP 3333's write(): kept, sent before the iterable's bytes

        result = self.wsgi(environ, start_response)
        try:
            body = b"".join([*written, *result])
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        status, headers = started[-1]
        return int(status.split(" ", 1)[0]), list(headers), body


def wsgi_environ(scope: Any) -> dict[str, Any]:
    """A PEP 3333 environ for an RSGI request scope, as granian's WSGI interface builds it: the
    path percent-decoded (RSGI decodes it as UTF-8; WSGI's is those bytes as latin-1, which the
    app decodes back), headers as HTTP_* (repeated ones joined by commas, cookies by "; ")."""
    server_host, _, server_port = scope.server.rpartition(":")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope.method, "SCRIPT_NAME": "",
        "PATH_INFO": scope.path.encode("utf-8", "surrogateescape").decode("latin-1"),
        "QUERY_STRING": scope.query_string, "SERVER_NAME": server_host, "SERVER_PORT": server_port,
        "SERVER_PROTOCOL": f"HTTP/{scope.http_version}", "REMOTE_ADDR": scope.client.rpartition(":")[0],
        "wsgi.version": (1, 0), "wsgi.url_scheme": scope.scheme, "wsgi.errors": sys.stderr,
        "wsgi.multithread": True, "wsgi.multiprocess": False, "wsgi.run_once": False, "wsgi.input_terminated": True,
    }
    headers = scope.headers
    for name in dict.fromkeys(headers.keys()):
        values = headers.get_all(name)
        value = ("; " if name == "cookie" else ",").join(values)
        if name == "content-type":
            environ["CONTENT_TYPE"] = value
        elif name == "content-length":
            environ["CONTENT_LENGTH"] = value
        else:
            environ["HTTP_" + name.upper().replace("-", "_")] = value
    if "HTTP_HOST" not in environ and scope.authority:
        environ["HTTP_HOST"] = scope.authority
    return environ


def _end_streams_on(signals: Iterable[signal.Signals], end_streams: Callable[[], object]) -> None:
    """Run `end_streams` when one of `signals` arrives, before the handler installed already
    (granian's, which stops the worker once its connections have ended)."""
    for sig in signals:
        previous = signal.getsignal(sig)

        def handler(signum: int, frame: FrameType | None, previous: Any = previous) -> None:
            end_streams()
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

        signal.signal(sig, handler)


def application_factory() -> Front:
    """What granian loads in its worker: configuration read here, once; the app started (its
    first refresh, then its refresher thread) before the worker takes a request, with the
    served-cut notifier registered on its store first."""
    cfg = load_config()
    setup_logging(cfg.log_format)
    heapdump.install("http", cfg.log_dir)  # off unless NAMESRV_TRACEMALLOC asks (a profiling run)
    app = create_app(cfg)
    served = ServedCuts(app.extensions[EXTENSION])  # a listener of the store: before it starts
    lifecycle.start(app)
    return Front(app, cfg, served)
