"""A ``.gz`` file's content in pieces, inflated by zlib directly (for the CSV parser).

:class:`gzip.GzipFile` reads its input 8 KiB at a time through two Python buffer layers and
checks the CRC in Python; zlib's own gzip wrapper (``wbits = 31``) parses the header and
checks CRC-32 and length in C, so a whole member costs one ``decompress`` call per output
piece. What :mod:`gzip` accepts is accepted: several members back to back, zero padding after
a member, an empty file (no content). A bad header, a bad checksum or a file that ends inside
a member is corruption (:class:`~streamload.errors.FormatError`); a failed read of the file
object (a remote error) is raised unchanged, so that the retry layer sees it.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import BinaryIO

from streamload.errors import FormatError

__all__ = ["READ_BYTES", "inflate_pieces"]

READ_BYTES = 1 << 18
"""Compressed bytes read from the file at a time."""
_GZIP = 16 + zlib.MAX_WBITS  # zlib's gzip wrapper: header, CRC-32 and length checked in C


def _corrupt(path: str, why: object) -> FormatError:
    return FormatError(f"{path}: not a readable gzip file ({why}); it is truncated or corrupt")


def inflate_pieces(fh: BinaryIO, path: str, piece_bytes: int) -> Iterator[bytes]:
    """The decompressed content of the gzip file ``fh``, in pieces of at most
    ``piece_bytes`` (none for an empty file).

    Raises:
        FormatError: not gzip, a bad checksum, or truncated (naming ``path``).
    """
    inflater: zlib._Decompress | None = None
    data, members, full = b"", 0, False
    while True:
        if not data and not full:  # a full piece may leave output inside zlib: drain it first
            data = fh.read(READ_BYTES)
            if not data:
                if inflater is not None:
                    raise _corrupt(path, "the file ends inside a compressed member")
                return
        if inflater is None:
            if members:  # gzip accepts zero bytes after a member
                data = data.lstrip(b"\0")
                if not data:
                    continue
            inflater = zlib.decompressobj(_GZIP)
        try:
            piece = inflater.decompress(data, piece_bytes)
        except zlib.error as exc:
            raise _corrupt(path, exc) from None
        full = len(piece) == piece_bytes
        data = inflater.unconsumed_tail
        if inflater.eof:  # the member ended: what follows is another member or padding
            data, inflater, members, full = inflater.unused_data, None, members + 1, False
        if piece:
            yield piece
