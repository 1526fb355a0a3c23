"""datatrove ``DocumentTokenizer`` output (``.ds`` + ``.ds.index``), read by nanotron.

* ``datatrove`` — the format: reader and ``DatatroveWriter``.

The package re-exports the names of :mod:`streamload.formats.datatrove.datatrove`: that module was
``streamload.formats.datatrove`` before the formats were grouped by family, and imports of the old
path keep working.
"""

from streamload.formats.datatrove.datatrove import (
    FORMAT,
    DatatroveFormat,
    DatatroveShard,
    DatatroveWriter,
    humanize_metric,
)

__all__ = [
    "FORMAT",
    "DatatroveFormat",
    "DatatroveShard",
    "DatatroveWriter",
    "humanize_metric",
]
