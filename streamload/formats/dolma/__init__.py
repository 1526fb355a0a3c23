"""Dolma ``dolma tokens`` output: headerless ``part-*.npy`` + ``part-*.csv.gz``.

* ``dolma`` — the format: reader and ``DolmaWriter``;
* ``_csv`` — streaming, vectorized reading of the ``.csv.gz`` document metadata.

The package re-exports the names of :mod:`streamload.formats.dolma.dolma`: that module was
``streamload.formats.dolma`` before the formats were grouped by family, and imports of the old
path keep working.
"""

from streamload.formats.dolma.dolma import (
    CSV_SUFFIX,
    FORMAT,
    DolmaFormat,
    DolmaShard,
    DolmaWriter,
    metadata_path,
)

__all__ = [
    "CSV_SUFFIX",
    "FORMAT",
    "DolmaFormat",
    "DolmaShard",
    "DolmaWriter",
    "metadata_path",
]
