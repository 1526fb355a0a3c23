"""The columns a text reader asks of a table (Arrow, Parquet, MDS), checked against the file.

The text readers of two families (:mod:`streamload.formats.arrow.text`,
:mod:`streamload.formats.mds.text`) give rows of the columns a caller names. A column the
file lacks is refused with one message for both, naming the file, the column and the columns
it has, as a :class:`MissingColumnError`: the caller knows which of its options named that
column and adds it (``set text_field``) without matching message text.

Example:
    ``requested_columns("x.parquet", ["text", "id", "text"], ["id", "text"])`` is
    ``["text", "id"]``; with ``["content", "id"]`` it raises ``x.parquet has no column
    'text' (its columns: content, id)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from streamload.errors import FormatError

__all__ = ["MissingColumnError", "requested_columns"]


class MissingColumnError(FormatError):
    """A file has no column of the name asked for.

    Attributes:
        path: The file.
        column: The column asked for.
        available: The file's columns, in its order.
    """

    def __init__(self, path: str, column: str, available: Sequence[str]) -> None:
        self.path = path
        self.column = column
        self.available = tuple(available)
        listed = ", ".join(self.available) or "none"
        super().__init__(f"{path} has no column {column!r} (its columns: {listed})")


def requested_columns(path: str, columns: Sequence[str], available: Sequence[str]) -> list[str]:
    """The distinct names of ``columns`` in their order, each one of ``available``.

    Raises:
        MissingColumnError: the first name of ``columns`` that ``available`` lacks.
    """
    have = set(available)
    for column in columns:
        if column not in have:
            raise MissingColumnError(path, column, available)
    return list(dict.fromkeys(columns))
