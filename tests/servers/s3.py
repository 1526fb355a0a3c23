"""A real S3-protocol server on loopback (moto's standalone server), and uploads to it.

Every request stays on 127.0.0.1: the server binds there, clients get its ``endpoint_url``
and static test credentials, the EC2 metadata lookup is disabled and proxies are cleared.

Example:
    >>> with S3Server() as server:                                  # doctest: +SKIP
    ...     server.upload_folder(local_folder, "bucket", "corpus")
    ...     fs = s3fs.S3FileSystem(**server.storage_options())
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.servers import free_port

__all__ = ["S3Server", "loopback_env"]


def loopback_env() -> dict[str, str]:
    """Environment that keeps AWS clients on loopback (no metadata service, no proxies)."""
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        "HTTP_PROXY": "",
        "HTTPS_PROXY": "",
        "http_proxy": "",
        "https_proxy": "",
    }


class S3Server:
    """moto's S3 server on 127.0.0.1 with a free port: in a thread of this process, or in a
    child process (``process=True``, so its CPU work does not compete with the reader's
    threads for this interpreter's GIL; the benchmark uses it)."""

    def __init__(self, process: bool = False) -> None:
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
        for key, value in loopback_env().items():
            os.environ[key] = value
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._child: subprocess.Popen[bytes] | None = None
        self._server: Any = None
        if not process:
            from moto.server import ThreadedMotoServer

            self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)

    def __enter__(self) -> S3Server:
        if self._server is not None:
            self._server.start()
            return self
        self._child = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        self._child.kill()
        raise RuntimeError(f"moto server did not listen on 127.0.0.1:{self.port} in 30 s")

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.stop()
        if self._child is not None:
            self._child.terminate()
            self._child.wait(timeout=10)

    credentials = ("testing", "testing")
    """Access key and secret the server accepts."""

    def storage_options(self, endpoint: str | None = None, **extra: Any) -> dict[str, Any]:
        """s3fs options for this server (or a proxy in front of it at ``endpoint``)."""
        return {
            "endpoint_url": endpoint or self.endpoint,
            "key": self.credentials[0],
            "secret": self.credentials[1],
            "client_kwargs": {"region_name": "us-east-1"},
            "skip_instance_cache": True,
            **extra,
        }

    def client(self) -> Any:
        """A boto3 client of the server."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.credentials[0],
            aws_secret_access_key=self.credentials[1],
            region_name="us-east-1",
        )

    def upload_folder(self, folder: Path, bucket: str, prefix: str) -> str:
        """Create ``bucket`` (if needed) and upload every file of ``folder`` (recursively)
        under ``prefix``; returns ``s3://bucket/prefix``."""
        client = self.client()
        existing = [b["Name"] for b in client.list_buckets().get("Buckets", [])]
        if bucket not in existing:
            client.create_bucket(Bucket=bucket)
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                key = f"{prefix}/{path.relative_to(folder).as_posix()}"
                client.upload_file(str(path), bucket, key)
        return f"s3://{bucket}/{prefix}"
