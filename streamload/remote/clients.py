"""The client libraries' own retries and time limits, set so that streamload's retry loop
(:mod:`streamload.remote.retry`) is the only one.

Left alone, s3fs retries each call 5 times and botocore each of those requests up to 5 times
more, each with its own backoff and a 15 s read timeout: a permanently failing endpoint cost
91 s at start-up with ``storage.retries = 8``, and an abandoned request lived on for minutes.
Where streamload builds a file system (the listing at start-up, each process's store) it sets,
unless the source's ``storage_options`` set them already:

========== ==================================================== ==============================
protocol   retries inside one attempt                           a request's own time limit
========== ==================================================== ==============================
s3, s3a    none: botocore ``total_max_attempts = 1``, s3fs      botocore ``connect_timeout``
           ``retries = 1``                                      and ``read_timeout``
gs, gcs    gcsfs's own (6, fixed when gcsfs is imported)        ``requests_timeout``
az, abfs   azure-core's (adlfs passes no retry policy)          ``connection_timeout``,
                                                                ``read_timeout``
http(s)    none (aiohttp)                                       aiohttp ``sock_connect``,
                                                                ``sock_read``
========== ==================================================== ==============================

Each limit is ``storage.timeout``: a request that stops answering ends on its own about when
streamload abandons it. Retries gcsfs and azure-core make inside one attempt are cut short by
that attempt's ``storage.timeout`` all the same (docs/remote.md, "Faults").
"""

from __future__ import annotations

import math
from typing import Any

from streamload.config.storage import StorageConfig

__all__ = ["client_options", "limit_client_retries"]

_S3 = frozenset({"s3", "s3a"})
_GCS = frozenset({"gs", "gcs"})
_AZURE = frozenset({"az", "abfs", "abfss", "adl"})
_HTTP = frozenset({"http", "https"})


def client_options(protocol: str, options: dict[str, Any], config: StorageConfig) -> dict[str, Any]:
    """``options`` for building the ``protocol`` file system, plus the retry and time limits
    of the module docstring where they are not set (the caller's dict is not changed)."""
    out = dict(options)
    seconds = config.timeout
    if protocol in _S3:
        kwargs = dict(out.get("config_kwargs") or {})
        kwargs.setdefault("retries", {"total_max_attempts": 1})
        kwargs.setdefault("connect_timeout", seconds)
        kwargs.setdefault("read_timeout", seconds)
        out["config_kwargs"] = kwargs
    elif protocol in _GCS:
        out.setdefault("requests_timeout", seconds)
    elif protocol in _AZURE:
        whole = max(1, math.ceil(seconds))  # adlfs passes whole seconds to azure-core
        out.setdefault("connection_timeout", whole)
        out.setdefault("read_timeout", whole)
    elif protocol in _HTTP:
        import aiohttp  # fsspec's HTTP file system needs it anyway

        client = dict(out.get("client_kwargs") or {})
        client.setdefault(
            "timeout", aiohttp.ClientTimeout(total=None, sock_connect=seconds, sock_read=seconds)
        )
        out["client_kwargs"] = client
    return out


def limit_client_retries(fs: Any) -> Any:
    """``fs`` with s3fs's own retry loop cut to one attempt (an attribute, not an option of
    ``S3FileSystem``); other file systems unchanged."""
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if _S3.intersection(protocols) and isinstance(getattr(fs, "retries", None), int):
        fs.retries = 1
    return fs
