"""A loopback HTTP proxy that stalls chosen requests: it accepts the connection, reads the
request, and then never answers (``mode = "request"``), or answers the status line and
headers and never sends the body (``mode = "body"``); or fails them at once with a 503
(``mode = "fail"``: a permanently failing store). Requests the plan does not match are
forwarded to the upstream server (moto's S3 server, or a :class:`RangeFileServer`); without an
upstream, every request stalls (a server that accepts connections and never answers).

A stalled handler waits until the proxy is closed, then drops the connection, so a test ends
and leaves no thread behind (the handlers are daemon threads).

Example:
    >>> plan = StallPlan(paths=("shard_1.bin",), ranged=True)      # doctest: +SKIP
    >>> with StallingProxy(s3.endpoint, plan) as proxy:
    ...     options = s3.storage_options(proxy.endpoint)
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

from tests.servers import free_port
from tests.servers.http import FaultPlan, _ProxyHandler

__all__ = ["StallPlan", "StallingProxy"]


@dataclass
class StallPlan:
    """Which requests stall, and how.

    Args:
        paths: Path substrings (``""`` matches every path); a request stalls when its path
            holds one of them and it passes the other filters.
        ranged: ``True``: only requests with a ``Range`` header (token and header reads);
            ``False``: only requests without one (listings, metadata); ``None``: both.
        methods: HTTP methods that may stall.
        mode: ``"request"``: never answer; ``"body"``: send the status line and headers (with
            the full ``Content-Length``), then stall before the body (a ``HEAD`` has no body:
            it stalls before answering); ``"fail"``: answer 503 at once (and count it).
        after: Matching requests answered normally before the stalls begin.
    """

    paths: tuple[str, ...] = ("",)
    ranged: bool | None = None
    methods: tuple[str, ...] = ("GET", "HEAD")
    mode: str = "request"
    after: int = 0
    stalled: list[str] = field(default_factory=list)
    """Method and path of each stalled request (filled in by the proxy)."""
    passed: list[int] = field(default_factory=lambda: [0])

    def __post_init__(self) -> None:
        if self.mode not in ("request", "body", "fail"):
            raise ValueError(f"mode = {self.mode!r}: 'request', 'body' or 'fail'")


class _StallHandler(_ProxyHandler):
    stall_plan: StallPlan
    release: threading.Event
    forwards: bool
    lock: threading.Lock

    def _stalls(self) -> bool:
        plan = self.stall_plan
        if self.command not in plan.methods or not any(p in self.path for p in plan.paths):
            return False
        if plan.ranged is not None and ("Range" in self.headers) != plan.ranged:
            return False
        with self.lock:
            if plan.passed[0] < plan.after:
                plan.passed[0] += 1
                return False
            plan.stalled.append(f"{self.command} {self.path}")
        return True

    def _forward(self) -> None:
        if self.forwards and not self._stalls():
            super()._forward()
            return
        if not self.forwards:
            with self.lock:
                self.stall_plan.stalled.append(f"{self.command} {self.path}")
        if self.stall_plan.mode == "fail":
            self._fail()
            return
        if self.stall_plan.mode == "body" and self.command == "GET":
            self._headers_then_stall()
        self.release.wait()  # until the proxy closes: never answer (more)
        self.close_connection = True

    def _fail(self) -> None:
        payload = b"<Error><Code>ServiceUnavailable</Code><Message>injected</Message></Error>"
        self.send_response(503)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _headers_then_stall(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if self.forwards:
            status, headers, data = self._upstream(body)
        else:  # no upstream: a large body announced, never sent
            status, headers, data = 200, [("Content-Length", str(1 << 20))], b""
        self.send_response(status)
        for key, value in headers:
            if key.lower() not in ("connection", "transfer-encoding", "date", "server"):
                self.send_header(key, value)
        self.end_headers()
        if data:
            self.wfile.write(data[:1])  # one byte of the body, then nothing
        self.wfile.flush()

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward


class StallingProxy:
    """An HTTP proxy on 127.0.0.1 in front of ``upstream`` (``http://127.0.0.1:port``, or
    ``None``: every request stalls) that stalls the requests ``plan`` matches."""

    def __init__(self, upstream: str | None, plan: StallPlan | None = None) -> None:
        self.plan = plan or StallPlan()
        self.release = threading.Event()
        host, port = (upstream or "http://127.0.0.1:0").removeprefix("http://").split(":")
        attributes: dict[str, Any] = {
            "upstream": (host, int(port)),
            "plan": FaultPlan(),
            "rng": random.Random(0),
            "stall_plan": self.plan,
            "release": self.release,
            "forwards": upstream is not None,
            "lock": threading.Lock(),
        }
        handler = type("Handler", (_StallHandler,), attributes)
        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StallingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
