"""Loopback S3 servers and a latency proxy for ``benchmarks/remote.py``, each in its own process.

* :class:`S3rver` — the npm package ``s3rver`` (Node.js, files on disk), installed by
  ``npm ci --prefix benchmarks/s3rver``. It answers a range GET in well under a millisecond
  of its own CPU, where moto (Python, the tests' server) needs several, so the loader's side
  is what is measured.
* ``S3Server(process=True)`` from ``tests/servers/s3.py`` — moto, when s3rver is not installed.
* :class:`ProxyProcess` — the tests' fault proxy (``tests/servers/http.py``) in a child process, so
  the bytes it copies do not take this interpreter's GIL from the loader being measured.

Everything binds 127.0.0.1; nothing leaves the machine.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from _common import BENCH_DIR

sys.path.insert(0, str(BENCH_DIR.parent))  # the tests' loopback servers (tests/servers/)
from tests.servers import free_port
from tests.servers.s3 import S3Server, loopback_env

__all__ = ["S3RVER_BIN", "ProxyProcess", "S3rver", "s3_server"]

S3RVER_BIN = BENCH_DIR / "s3rver" / "node_modules" / ".bin" / "s3rver"


def _wait_listening(port: int, child: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise RuntimeError(f"{what} exited with {child.returncode} before listening")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    child.kill()
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} in 30 s")


class S3rver(S3Server):
    """s3rver on 127.0.0.1 with a free port and a temporary data folder (same interface as
    the tests' moto server: ``endpoint``, ``storage_options``, ``client``, ``upload_folder``)."""

    name = "s3rver 3.7.1 (Node.js)"
    credentials = ("S3RVER", "S3RVER")  # the only ones s3rver accepts

    def __init__(self) -> None:
        os.environ.update(loopback_env())
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._data = tempfile.mkdtemp(prefix="s3rver-")
        self._child: subprocess.Popen[bytes] | None = None
        self._server = None

    def __enter__(self) -> S3rver:
        command = [str(S3RVER_BIN), "--silent", "-d", self._data, "-a", "127.0.0.1"]
        self._child = subprocess.Popen(
            [*command, "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_listening(self.port, self._child, "s3rver")
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        shutil.rmtree(self._data, ignore_errors=True)


def s3_server(kind: str) -> S3Server:
    """``"s3rver"`` (when installed), ``"moto"``, or ``"auto"`` (s3rver if installed)."""
    if kind == "auto":
        kind = "s3rver" if S3RVER_BIN.exists() else "moto"
    if kind == "s3rver":
        if not S3RVER_BIN.exists():
            raise SystemExit("s3rver is not installed: npm ci --prefix benchmarks/s3rver")
        return S3rver()
    server = S3Server(process=True)
    server.name = "moto (Python)"  # type: ignore[attr-defined]
    return server


_PROXY_MAIN = """
import sys, time
sys.path.insert(0, {repo!r})
from tests.servers.http import FaultPlan, FaultProxy
with FaultProxy({upstream!r}, FaultPlan(latency={latency!r})) as proxy:
    print(proxy.endpoint, flush=True)
    while True:
        time.sleep(3600)
"""


class ProxyProcess:
    """The tests' fault proxy adding ``latency`` seconds per request, in a child process."""

    def __init__(self, upstream: str, latency: float) -> None:
        repo = str(BENCH_DIR.parent)
        code = _PROXY_MAIN.format(repo=repo, upstream=upstream, latency=latency)
        self._child = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert self._child.stdout is not None
        self.endpoint = self._child.stdout.readline().decode().strip()
        if not self.endpoint:
            raise RuntimeError("the latency proxy did not start")

    def __enter__(self) -> ProxyProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self._child.terminate()
        self._child.wait(timeout=10)
