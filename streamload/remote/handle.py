"""Names of remote things that travel between processes: an object as listed, and a storage.

:class:`RemoteObject` is one file (URL, size, version) and the content keys of its byte
ranges; :class:`StorageHandle` names a storage picklably (protocol, options, ``[storage]``,
``on_error``), so shard descriptors carry it into worker processes, where
:meth:`StorageHandle.store` finds or builds that process's
:class:`~streamload.remote.store.RemoteStore`.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from streamload.config.storage import StorageConfig

if TYPE_CHECKING:
    from streamload.remote.store import RemoteStore

__all__ = ["RemoteObject", "StorageHandle"]


@dataclass(frozen=True)
class RemoteObject:
    """One remote file as listed at start-up: URL, size and version (ETag/mtime)."""

    url: str
    size: int
    version: str = ""

    def key(self, start: int, end: int) -> str:
        """Content key of bytes ``[start, end)`` of this version of the object."""
        text = f"{self.url}\0{self.size}\0{self.version}\0{start}\0{end}"
        return hashlib.sha256(text.encode()).hexdigest()[:40]


@dataclass(frozen=True, eq=False)
class StorageHandle:
    """Picklable name of a storage: fsspec protocol and options, the ``[storage]`` config and
    the source's ``on_error``. :meth:`store` is this process's :class:`RemoteStore` for it.
    """

    protocol: str
    options: dict[str, Any] = field(repr=False)
    config: StorageConfig
    on_error: str = "raise"

    @functools.cached_property
    def key(self) -> str:
        """Identity of the store (equal handles share one store per process); computed once
        (``cached_property`` writes the instance ``__dict__`` directly, so it works on a frozen
        dataclass and survives pickling)."""
        return json.dumps(
            [self.protocol, self.options, asdict(self.config)], sort_keys=True, default=repr
        )

    def store(self) -> RemoteStore:
        """This process's store for the handle."""
        from streamload.remote.store import RemoteStore  # the store module imports this one

        return RemoteStore.for_handle(self)
