"""A real Azure Blob server on loopback (Microsoft's ``azurite``, Node.js), and uploads to it.

``azurite-blob`` runs in a child process on 127.0.0.1 with a free port, in-memory storage and
telemetry off; clients reach it through adlfs with a connection string for Azurite's
well-known development account (``devstoreaccount1`` and its published key), so nothing leaves
the machine. Install it with ``npm ci --prefix tests/servers/azurite`` (the package files are in
``tests/servers/azurite/``); an ``azurite-blob`` on ``PATH`` is used otherwise.

Example:
    >>> with AzuriteServer() as server:                             # doctest: +SKIP
    ...     url = server.upload_folder(local_folder, "container", "corpus")  # az://container/corpus
    ...     fs, _ = fsspec.core.url_to_fs(url, **server.storage_options())
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from tests.servers import free_port
from tests.servers.gcs import ServerProcess

__all__ = ["ACCOUNT", "ACCOUNT_KEY", "AzuriteServer", "azurite_command"]

ACCOUNT = "devstoreaccount1"
"""Azurite's built-in development account."""
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
"""Its published key (Azurite's documentation; it grants access to the emulator only)."""

_LOCAL_BIN = Path(__file__).parent / "azurite" / "node_modules" / ".bin" / "azurite-blob"


def azurite_command() -> str | None:
    """The ``azurite-blob`` executable: ``tests/servers/azurite``'s npm install, else
    ``PATH``'s, else ``None`` (Node.js must be on ``PATH`` either way)."""
    if shutil.which("node") is None:
        return None
    if _LOCAL_BIN.exists():
        return str(_LOCAL_BIN)
    return shutil.which("azurite-blob")


class AzuriteServer:
    """Azurite's blob service on 127.0.0.1 with a free port, in a child process.

    Raises:
        RuntimeError: Azurite (or Node.js) is not installed, or the server did not start.
    """

    def __init__(self) -> None:
        command = azurite_command()
        if command is None:
            raise RuntimeError(
                "azurite-blob not found: run `npm ci --prefix tests/servers/azurite`"
            )
        self._command = command
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}/{ACCOUNT}"
        self._server: ServerProcess | None = None
        self._workdir: str | None = None

    def __enter__(self) -> AzuriteServer:
        # --skipApiVersionCheck: azure-storage-blob may speak a newer REST version than this
        # Azurite release knows; the calls adlfs makes exist in every version.
        command = [self._command, "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
                   "--inMemoryPersistence", "--extentMemoryLimit", "512", "--disableTelemetry",
                   "--skipApiVersionCheck", "--silent"]  # fmt: skip
        self._workdir = tempfile.mkdtemp(prefix="azurite-")  # anything it writes lands here
        try:
            self._server = ServerProcess(command, self.port, "azurite", cwd=Path(self._workdir))
        except BaseException:
            shutil.rmtree(self._workdir, ignore_errors=True)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.stop()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)

    @property
    def connection_string(self) -> str:
        """The connection string of the development account on this server."""
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint={self.endpoint};"
        )

    def storage_options(self, **extra: Any) -> dict[str, Any]:
        """adlfs options for this server."""
        return {"connection_string": self.connection_string, "skip_instance_cache": True, **extra}

    def filesystem(self) -> Any:
        """An adlfs file system of the server."""
        from adlfs import AzureBlobFileSystem

        return AzureBlobFileSystem(**self.storage_options())

    def upload_folder(self, folder: Path, container: str, prefix: str) -> str:
        """Create ``container`` (if needed) and upload every file of ``folder`` (recursively)
        under ``prefix``; returns ``az://container/prefix``."""
        fs = self.filesystem()
        if not fs.exists(container):
            fs.mkdir(container)
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                rel = path.relative_to(folder).as_posix()
                fs.put_file(str(path), f"{container}/{prefix}/{rel}")
        return f"az://{container}/{prefix}"
