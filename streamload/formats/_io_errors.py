"""Tell a decoder's "this file is corrupt" from a failed read of the file.

A format parses bytes it reads from a file object: a local file, or a remote one whose reads
can fail (a 500, a reset connection). Both kinds of failure can arrive as ``OSError``:
pyarrow raises a plain ``OSError`` for a Parquet footer it cannot deserialize, :mod:`gzip`
raises ``BadGzipFile`` (an ``OSError``) for a bad header, while s3fs turns a 500 into
``OSError(EREMOTEIO, ...)`` and a dropped connection is a ``ConnectionResetError``. Only the
first kind is a :class:`~streamload.errors.FormatError`; the second must reach the retry
layer (:mod:`streamload.remote.retry`) unchanged, or a transient error is reported as
corruption, never retried, and ``on_error = "skip"`` never applies (issue 36).

Example:
    ``is_parse_error(OSError("Couldn't deserialize thrift"))`` is True;
    ``is_parse_error(OSError(121, "InternalError"))`` and
    ``is_parse_error(ConnectionResetError())`` are False.
"""

from __future__ import annotations

import gzip

__all__ = ["is_parse_error"]


def is_parse_error(exc: BaseException) -> bool:
    """Whether ``exc``, raised while decoding a file, says the bytes are bad (not that reading
    them failed): anything that is not an ``OSError``; ``gzip.BadGzipFile``; and a plain
    ``OSError`` without an ``errno`` (a decoder's own message). Any other ``OSError`` (a
    subclass such as ``ConnectionResetError``, or one with an ``errno``) is an I/O error."""
    if not isinstance(exc, OSError) or isinstance(exc, gzip.BadGzipFile):
        return True
    return type(exc) is OSError and exc.errno is None
