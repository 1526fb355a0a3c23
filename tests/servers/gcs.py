"""A real GCS JSON-API server on loopback (``gcp-storage-emulator``), and uploads to it.

The emulator runs in a child process on 127.0.0.1 with a free port and in-memory storage;
clients reach it through gcsfs with ``endpoint_url`` and ``token="anon"``, so nothing leaves
the machine and no credentials are looked up.

gcsfs >= 2026.1 defaults to its "extended" file system, which asks the gRPC storage-control
API for each bucket's layout (zonal or hierarchical) before listing; an emulator has no such
API, so every lookup waits for a 30 s timeout and is repeated on the next call. gcsfs's own
switch ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`` selects the plain JSON-API file system;
:func:`plain_gcsfs` sets it (for child processes) and registers that class for ``gs://`` in
this process (in case gcsfs was imported before).

Example:
    >>> with GCSServer() as server:                                 # doctest: +SKIP
    ...     url = server.upload_folder(local_folder, "bucket", "corpus")   # gs://bucket/corpus
    ...     fs, _ = fsspec.core.url_to_fs(url, **server.storage_options())
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.servers import free_port

__all__ = ["GCSServer", "ServerProcess", "plain_gcsfs"]


def plain_gcsfs() -> None:
    """Use gcsfs's JSON-API file system for ``gs://`` and ``gcs://`` (no gRPC layout lookup)."""
    os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
    import fsspec
    from gcsfs.core import GCSFileSystem

    for protocol in ("gs", "gcs"):
        fsspec.register_implementation(protocol, GCSFileSystem, clobber=True)


class GCSServer:
    """``gcp-storage-emulator`` on 127.0.0.1 in a child process (its single-threaded HTTP
    server does not compete with the reader's threads for this interpreter's GIL)."""

    project = "streamload-test"
    """Project the emulator's buckets are created in."""

    def __init__(self) -> None:
        plain_gcsfs()
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server: ServerProcess | None = None

    def __enter__(self) -> GCSServer:
        command = [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1",
                   "--port", str(self.port), "--in-memory", "--quiet"]  # fmt: skip
        self._server = ServerProcess(command, self.port, "gcp-storage-emulator")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.stop()

    def storage_options(self, **extra: Any) -> dict[str, Any]:
        """gcsfs options for this server."""
        return {
            "endpoint_url": self.endpoint,
            "token": "anon",
            "project": self.project,
            "skip_instance_cache": True,
            **extra,
        }

    def filesystem(self) -> Any:
        """A gcsfs file system of the server."""
        from gcsfs.core import GCSFileSystem

        return GCSFileSystem(**self.storage_options())

    def upload_folder(self, folder: Path, bucket: str, prefix: str) -> str:
        """Create ``bucket`` (if needed) and upload every file of ``folder`` (recursively)
        under ``prefix``; returns ``gs://bucket/prefix``."""
        fs = self.filesystem()
        if not fs.exists(bucket):
            fs.mkdir(bucket)
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                fs.put_file(str(path), f"{bucket}/{prefix}/{path.relative_to(folder).as_posix()}")
        return f"gs://{bucket}/{prefix}"


class ServerProcess:
    """A server started as a child process, listening on 127.0.0.1:``port``.

    The constructor waits until it accepts connections (30 s at most). Its output goes to a
    temporary file (a pipe nobody reads could fill and block it), quoted if it exits early.

    Raises:
        RuntimeError: the server exited or did not listen in time.
    """

    def __init__(self, command: list[str], port: int, name: str, cwd: Path | None = None) -> None:
        env = dict(os.environ)
        for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            env.pop(key, None)
        self.name = name
        self._log = tempfile.TemporaryFile()  # noqa: SIM115  (closed by stop())
        self._child = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=cwd
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self._child.poll() is not None:
                output = self.output()
                self.stop()
                raise RuntimeError(f"{name} exited with code {self._child.returncode}: {output}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.05)
        output = self.output()
        self.stop()
        raise RuntimeError(f"{name} did not listen on 127.0.0.1:{port} in 30 s: {output}")

    def output(self) -> str:
        """The last 2000 characters the server printed."""
        fd = self._log.fileno()  # pread: the child shares (and moves) the file offset
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")[-2000:]

    def stop(self) -> None:
        """Terminate the server (kill it after 10 s)."""
        if self._child.poll() is None:
            self._child.terminate()
            try:
                self._child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._child.kill()
                self._child.wait()
        self._log.close()
