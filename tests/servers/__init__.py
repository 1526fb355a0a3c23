"""Real storage servers on loopback for the remote tests: S3 (moto), GCS
(``gcp-storage-emulator``), Azure Blob (Azurite, installed by ``npm ci --prefix
tests/servers/azurite``) and plain HTTP with a fault-injecting proxy.

Import them by their full name (``from tests.servers.s3 import S3Server``).
"""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
