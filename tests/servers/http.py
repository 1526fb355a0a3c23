"""Loopback HTTP servers for the remote-storage tests: a static file server that honours
``Range``, and a fault-injecting proxy in front of another server (the S3 server).

Both bind 127.0.0.1 on a free port and run in daemon threads; faults are drawn from a seeded
generator and bounded in count, so a test is repeatable and ends.
"""

from __future__ import annotations

import http.client
import os
import random
import re
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from tests.servers import free_port

__all__ = ["FaultPlan", "FaultProxy", "RangeFileServer"]

_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


class _RangeHandler(SimpleHTTPRequestHandler):
    """Static files with single-range ``Range: bytes=a-b`` support (206 + Content-Range) and
    an ``ETag`` on every answer (``If-Match`` is ignored, as some servers do); with
    ``validators = False`` neither ``ETag`` nor ``Last-Modified`` (an unversioned store)."""

    validators = True
    flaky: ClassVar[list[int]] = [0]  # requests without Range still to answer 503 (shared)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _flake(self) -> bool:
        if "Range" in self.headers or self.flaky[0] <= 0:
            return False
        self.flaky[0] -= 1
        self.send_error(503, "Slow Down")
        return True

    def do_HEAD(self) -> None:
        if not self._flake():
            super().do_HEAD()

    def do_GET(self) -> None:
        if not self._flake():
            super().do_GET()

    def send_header(self, keyword: str, value: str) -> None:
        if self.validators or keyword.lower() != "last-modified":
            super().send_header(keyword, value)

    def end_headers(self) -> None:
        path = self.translate_path(self.path)
        if self.validators and os.path.isfile(path):  # an entity tag like nginx's (mtime and
            stat = os.stat(path)  # size); If-Match ignored
            self.send_header("ETag", f'"{stat.st_mtime_ns:x}-{stat.st_size:x}"')
        super().end_headers()

    def send_head(self) -> Any:
        match = _RANGE.match(self.headers.get("Range", ""))
        path = self.translate_path(self.path)
        if match is None or not os.path.isfile(path):
            return super().send_head()
        size = os.path.getsize(path)
        start = int(match.group(1))
        end = min(int(match.group(2)) if match.group(2) else size - 1, size - 1)
        if start >= size:
            self.send_error(416, "Requested Range Not Satisfiable")
            return None
        fh = open(path, "rb")  # noqa: SIM115 - closed by copyfile's caller
        fh.seek(start)
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        self._remaining = end - start + 1
        return fh

    def copyfile(self, source: Any, outputfile: Any) -> None:
        remaining = getattr(self, "_remaining", None)
        if remaining is None:
            return super().copyfile(source, outputfile)
        outputfile.write(source.read(remaining))
        return None


class RangeFileServer:
    """Serves ``root`` over HTTP on 127.0.0.1 (a free port), honouring ``Range``; with
    ``validators = False`` its answers carry no ``ETag`` or ``Last-Modified``; ``flaky``
    metadata requests (no ``Range``) are answered 503 first."""

    def __init__(self, root: Path, validators: bool = True, flaky: int = 0) -> None:
        self.flaky = [flaky]  # the first ``flaky`` requests without Range are answered 503
        attributes = {"validators": validators, "flaky": self.flaky}
        handler = partial(type("Handler", (_RangeHandler,), attributes), directory=str(root))
        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> RangeFileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class FaultPlan:
    """What the proxy does to ranged GETs (the token reads; listings pass untouched).

    Args:
        latency: Seconds added before every forwarded request.
        error_rate: Share of ranged GETs answered 503.
        truncate_rate: Share of ranged GETs whose body is cut in half (connection closed).
        max_faults: Faults injected at most (then everything passes).
        fail_paths: Path substrings always answered ``fail_status`` (a permanently
            unreadable object).
        fail_status: 403 (access denied: no retry) or a 5xx (retried until exhausted).
        slow_paths: Path substrings delayed by ``slow_seconds`` more.
        slow_seconds: Extra delay of ``slow_paths``.
        seed: Seed of the fault draws.
        fail_nth: ``(substring, n)``: the ``n``-th GET (1-based, ranged or not, counted over
            every path that holds ``substring``) is answered ``fail_status``, once (a
            transient 5xx at a chosen point of a file's reads: footer, header, tokens).
        fail_count: GETs answered so from the ``n``-th on (default 1: a transient error).
        fail_whole_reads: ``fail_paths`` apply to GETs without ``Range`` too (a whole-object
            read, e.g. s3fs's ``cat_file``).
    """

    latency: float = 0.0
    error_rate: float = 0.0
    truncate_rate: float = 0.0
    max_faults: int = 1000
    fail_paths: tuple[str, ...] = ()
    fail_status: int = 403
    slow_paths: tuple[str, ...] = ()
    slow_seconds: float = 0.0
    seed: int = 0
    fail_nth: tuple[str, int] | None = None
    fail_count: int = 1
    fail_whole_reads: bool = False
    injected: dict[str, int] = field(default_factory=lambda: {"errors": 0, "truncated": 0})
    gets: list[str] = field(default_factory=list)
    """The GETs ``fail_nth`` counted, in order."""


class _ProxyHandler(SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream: tuple[str, int]
    plan: FaultPlan
    rng: random.Random
    lock: threading.Lock

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _draw(self) -> str:
        plan = self.plan
        if self.command == "GET" and plan.fail_nth is not None and plan.fail_nth[0] in self.path:
            with self.lock:
                plan.gets.append(self.path)
                if 0 <= len(plan.gets) - plan.fail_nth[1] < plan.fail_count:
                    plan.injected["errors"] += 1
                    return "fail"
        failing = any(p in self.path for p in plan.fail_paths)
        if self.command == "GET" and failing and plan.fail_whole_reads:
            return "fail"
        if self.command != "GET" or "Range" not in self.headers:
            return "pass"
        if failing:
            return "fail"
        with self.lock:
            if sum(plan.injected.values()) >= plan.max_faults:
                return "pass"
            draw = self.rng.random()
            if draw < plan.error_rate:
                plan.injected["errors"] += 1
                return "error"
            if draw < plan.error_rate + plan.truncate_rate:
                plan.injected["truncated"] += 1
                return "truncate"
        return "pass"

    def _forward(self) -> None:
        plan = self.plan
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        fault = self._draw()
        delay = plan.latency + (
            plan.slow_seconds if any(p in self.path for p in plan.slow_paths) else 0.0
        )
        if delay:
            time.sleep(delay)
        if fault in ("error", "fail"):
            status = 503 if fault == "error" else plan.fail_status
            code = b"AccessDenied" if status == 403 else b"InternalError"
            payload = b"<Error><Code>" + code + b"</Code><Message>injected</Message></Error>"
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        try:
            status, upstream_headers, data = self._upstream(body)
        except OSError:  # the server dropped the connection: the client sees a 502
            status, upstream_headers, data = 502, [], b""
        self.send_response(status)
        length = str(len(data))
        for key, value in upstream_headers:
            if key.lower() == "content-length" and self.command == "HEAD":
                length = value  # a HEAD answer has no body but the object's length
            elif key.lower() not in (
                "connection",
                "transfer-encoding",
                "content-length",
                "date",
                "server",
            ):
                self.send_header(key, value)
        self.send_header("Content-Length", length)
        if fault == "truncate":
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.close_connection = True
            return
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _upstream(self, body: bytes | None) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.upstream, timeout=30)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
            conn.request(self.command, self.path, body=body, headers=headers)
            response = conn.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            conn.close()

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except OSError:  # the client gave up (a timeout, a closed loader): nothing to answer
            self.close_connection = True

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of ``upstream`` (``http://127.0.0.1:port``) that
    applies a :class:`FaultPlan`."""

    def __init__(self, upstream: str, plan: FaultPlan) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        handler = type(
            "Handler",
            (_ProxyHandler,),
            {
                "upstream": (host, int(port)),
                "plan": plan,
                "rng": random.Random(plan.seed),
                "lock": threading.Lock(),
            },
        )
        self.plan = plan
        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
