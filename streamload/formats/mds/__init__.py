"""Mosaic Streaming MDS shards, found by their folder's ``index.json``.

* ``mds`` — the format: reader and ``MdsWriter``;
* ``write`` — MDS shard bytes exactly as mosaicml-streaming's ``MDSWriter`` writes them;
* ``_read`` (a shard's bytes, decompressed), ``_column`` (which column holds the tokens),
  ``_decode`` (the token column decoded into one array), ``_cache`` (those arrays on disk).

The ``index.json`` parser (``streamload.formats._mds_index``) is at the root: the root's
``index_json`` parses MDS and LitData indexes alike.

The package re-exports the names of :mod:`streamload.formats.mds.mds`: that module was
``streamload.formats.mds`` before the formats were grouped by family, and imports of the old
path keep working.
"""

from streamload.formats.mds.mds import (
    FORMAT,
    FORMAT_NAME,
    MDS_SIZE_LIMIT,
    TOKEN_COLUMN,
    MdsFormat,
    MdsShard,
    MdsWriter,
)

__all__ = [
    "FORMAT",
    "FORMAT_NAME",
    "MDS_SIZE_LIMIT",
    "TOKEN_COLUMN",
    "MdsFormat",
    "MdsShard",
    "MdsWriter",
]
