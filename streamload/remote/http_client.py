"""Range GETs over pooled HTTP connections, to URLs the fsspec file system signs once per object.

An s3fs range read costs its client ~1.4 ms of CPU (botocore builds, signs and parses every
request on an asyncio loop in another thread); a GET on a pooled ``urllib3`` connection costs
~0.35 ms (``benchmarks/remote.py --parts client``). Signing stays with fsspec: ``fs.sign(url)``
presigns a GET with the same credentials, profiles, roles and endpoint as every other call, once
per object and ``SIGN_LIFETIME`` (the ``Range`` header is not part of the signature, so one URL
serves every range of the object). ``http(s)://`` sources are fetched at their own URL, with the
``headers`` of their storage options.

Every answer is checked: a ``206`` must carry the requested ``Content-Range``; a listed ETag is
sent as ``If-Match`` and compared with the answer's ``ETag``, so an object replaced after
start-up is an error naming it, never bytes of another version. Status codes map to the errors
:class:`~streamload.remote.fetch.RangeFetcher` retries (5xx, throttling, truncated bodies) or
reports at once (404, 403, 412, 416).
"""

from __future__ import annotations

import importlib.util
import threading
import time
from typing import Any

from streamload.config.storage import RangeClient, StorageConfig
from streamload.errors import ConfigError, RemoteReadError
from streamload.remote.handle import RemoteObject

__all__ = ["SIGN_LIFETIME", "HttpRangeClient", "SignatureRefused", "http_client_for"]

SIGN_LIFETIME = 3600
"""Seconds a presigned URL is valid; it is signed anew after half of that."""
_SIGNED_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl"})
_S3_GET_OPTIONS = ("requester_pays", "s3_additional_kwargs", "version_aware")
"""s3fs options that change a GET beyond what a presigned URL carries (``auto`` keeps s3fs)."""
_HTTP_PLAIN_OPTIONS = frozenset(
    {"headers", "skip_instance_cache", "use_listings_cache", "listings_expiry_time",
     "simple_links", "block_size", "same_scheme", "cache_type", "cache_options", "encoded"}
)  # fmt: skip
"""fsspec HTTP options a plain GET honours (others, such as ``client_kwargs``, keep fsspec)."""


class SignatureRefused(PermissionError):
    """The file system cannot presign, or the store refused a fresh signature (403/400)."""


def http_client_for(
    fs: Any, protocol: str, options: dict[str, Any], config: StorageConfig
) -> HttpRangeClient | None:
    """The HTTP range client ``storage.client`` asks for, or ``None`` (fsspec reads): with
    ``"auto"``, for ``s3://`` without options that change a GET and for plain ``http(s)://``."""
    if config.client is RangeClient.FSSPEC:
        return None
    if config.client is RangeClient.AUTO:
        if protocol in ("s3", "s3a"):
            if any(options.get(name) for name in _S3_GET_OPTIONS):
                return None
        elif protocol not in ("http", "https") or set(options) - _HTTP_PLAIN_OPTIONS:
            return None
        if importlib.util.find_spec("urllib3") is None:
            return None
    elif protocol not in _SIGNED_PROTOCOLS | {"http", "https"}:
        raise ConfigError(
            f"storage.client = 'http' cannot read {protocol}:// objects (s3, gs, az or "
            "http(s) only); use 'auto' or 'fsspec'"
        )
    connections = 2 * config.max_concurrency  # abandoned (timed-out) requests hold one too
    return HttpRangeClient(fs, protocol, options, connections, config.timeout)


class HttpRangeClient:
    """Range GETs of remote objects over pooled connections (see the module docstring).

    Args:
        fs: The fsspec file system (it signs URLs; ``http(s)`` URLs are used as they are).
        protocol: The source URL's protocol.
        options: The source's storage options (``headers`` are sent with ``http(s)`` GETs).
        connections: Connections kept open per host.
        timeout: Seconds to connect and between received bytes.
    """

    def __init__(
        self, fs: Any, protocol: str, options: dict[str, Any], connections: int, timeout: float
    ) -> None:
        import urllib3  # installed with s3fs (botocore) and requests; imported on first use

        self.fs = fs
        self.signs = protocol in _SIGNED_PROTOCOLS
        self.headers = {} if self.signs else dict(options.get("headers") or {})
        self._pool = urllib3.PoolManager(
            num_pools=64,
            maxsize=connections,
            retries=False,  # RangeFetcher retries, counts and backs off
            timeout=urllib3.Timeout(connect=timeout, read=timeout),
        )
        self._lock = threading.Lock()
        self._signed: dict[str, tuple[str, float]] = {}

    def url(self, url: str, *, fresh: bool = False) -> str:
        """The URL a GET of ``url`` goes to (signed, reused for half its lifetime)."""
        if not self.signs:
            return url
        now = time.monotonic()
        with self._lock:
            signed = self._signed.get(url)
        if signed is None or fresh or now - signed[1] > SIGN_LIFETIME / 2:
            try:
                signed = (self.fs.sign(url, expiration=SIGN_LIFETIME), now)
            except Exception as exc:  # NotImplementedError, no signing credentials, ...
                raise SignatureRefused(f"the file system cannot presign it: {exc!r}") from exc
            with self._lock:
                self._signed[url] = signed
        return signed[0]

    def get(self, obj: RemoteObject, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``obj`` (one attempt; a refused signature is renewed once).

        Raises:
            FileNotFoundError: 404. PermissionError: 403 (``SignatureRefused`` when a fresh
            signature was refused). RemoteReadError: the object changed since start-up, or the
            range is past its end. OSError: any other failed answer (retried by the caller).
        """
        try:
            return self._get(obj, start, end, fresh=False)
        except PermissionError:
            if not self.signs:
                raise
            try:  # an expired role session makes old signatures invalid: sign once more
                return self._get(obj, start, end, fresh=True)
            except PermissionError as exc:
                raise SignatureRefused(str(exc)) from exc

    def _get(self, obj: RemoteObject, start: int, end: int, *, fresh: bool) -> bytes:
        headers = {**self.headers, "Range": f"bytes={start}-{end - 1}"}
        etag = _etag(obj.version)
        if etag:
            headers["If-Match"] = etag
        reply = self._pool.request("GET", self.url(obj.url, fresh=fresh), headers=headers)
        status, data = reply.status, reply.data
        if status == 206 or (status == 200 and start == 0 and len(data) == end):
            _check_reply(obj, start, end, reply.headers, status, etag)
            return data
        raise _error(obj, start, end, status, data)

    def close(self) -> None:
        """Close the pooled connections."""
        self._pool.clear()


def _etag(version: str) -> str:
    """``version`` when it is an entity tag (a quoted string, as S3 lists ETags)."""
    return version if version.startswith(('"', 'W/"')) else ""


def _check_reply(
    obj: RemoteObject, start: int, end: int, headers: Any, status: int, etag: str
) -> None:
    """A 206 names the requested range of an object of the listed size (a store without
    ETags still shows a resized replacement); a listed ETag matches (for stores that ignore
    ``If-Match``)."""
    if status == 206:
        expected = f"bytes {start}-{end - 1}/"
        got = headers.get("Content-Range", "")
        if not got.startswith(expected):
            raise OSError(f"answer Content-Range {got!r}, expected {expected}…")
        total = got[len(expected) :]
        if total not in ("*", str(obj.size)):
            raise _changed(obj, f"it is now {total} bytes, listed as {obj.size}")
    answered = headers.get("ETag", "")
    if etag and answered and answered.removeprefix("W/") != etag.removeprefix("W/"):
        raise _changed(obj, f"its ETag is now {answered}, listed as {etag}")


def _changed(obj: RemoteObject, why: str) -> RemoteReadError:
    return RemoteReadError(
        f"{obj.url}: the object changed since the loader listed it at start-up ({why}); "
        "restart the job to read the new version (its fingerprint will differ)"
    )


def _error(obj: RemoteObject, start: int, end: int, status: int, body: bytes) -> Exception:
    """The error of a failed answer (``body``: the store's message, shortened)."""
    what = f"GET bytes [{start}, {end}) answered HTTP {status}: {body[:300]!r}"
    if status == 404:
        return FileNotFoundError(what)
    if status in (400, 401, 403):
        return PermissionError(what)
    if status == 412:
        return _changed(obj, f"If-Match {obj.version} failed")
    if status == 416:
        return RemoteReadError(f"{obj.url}: {what}; the object is shorter than {obj.size} bytes")
    if status == 200:
        return RemoteReadError(f"{obj.url}: the server ignored the Range header ({what})")
    return OSError(what)  # 5xx, 429 throttling, ...: retried
