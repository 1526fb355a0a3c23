"""LitData ``TokensLoader`` chunks, found by their folder's ``index.json``.

* ``litdata`` — the format: reader and ``LitdataWriter``;
* ``_write`` — chunks byte for byte as ``litdata.optimize`` writes them.

The ``index.json`` parser (``streamload.formats._litdata_index``) is at the root: the
root's ``index_json`` parses MDS and LitData indexes alike.

The package re-exports the names of :mod:`streamload.formats.litdata.litdata`: that module was
``streamload.formats.litdata`` before the formats were grouped by family, and imports of the old
path keep working.
"""

from streamload.formats.litdata.litdata import (
    DEFAULT_CHUNK_BYTES,
    FORMAT,
    FORMAT_NAME,
    LitdataFormat,
    LitdataWriter,
    check_chunk_header,
)

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "FORMAT",
    "FORMAT_NAME",
    "LitdataFormat",
    "LitdataWriter",
    "check_chunk_header",
]
