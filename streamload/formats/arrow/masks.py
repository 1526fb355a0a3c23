"""A table's loss-mask and id columns beside its token column (Hugging Face rows).

A tokenized SFT dataset often carries, beside ``input_ids``, a list column of the same shape
that says which tokens are trained (``loss_mask``, ``labels_mask``), and a scalar ``id``
column. The loss mask is read as the shard's loss mask (docs/formats.md "Loss masks"): the
mask shard is the token file itself read through the mask column
(:func:`streamload.formats.loss_mask.mask_shard` marks it ``mask_of`` the token column), its
values as ``uint8`` flags, nonzero = trained. ``attention_mask`` is never a loss mask (it
marks padding, not prompts) and is never picked by itself.

Which column, per shard (:func:`pick_mask_column`, from what describing recorded in the
shard's ``meta["column_types"]``, so no file is read at start-up): the source's
``mask_column`` (required in every file), else the first of :data:`MASK_COLUMNS` the file
has. Each row's flags must be as many as the row's tokens (:func:`check_row_lengths`,
checked where the mask is read: at open for Arrow, per row group for Parquet).

Example: rows of 3 and 2 tokens, mask column ``[[0, 1, 1], [1, 1]]``: offsets ``[0, 3, 5]``
on both sides, flags ``[0, 1, 1, 1, 1]``; a mask row ``[1]`` in place of ``[1, 1]`` is
refused naming row 1, 2 tokens and 1 flag.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streamload.errors import FormatError
from streamload.formats.arrow.columns import list_values

__all__ = [
    "MASK_COLUMNS",
    "check_row_lengths",
    "column_types",
    "mask_flags",
    "mask_lists",
    "pick_mask_column",
]

MASK_COLUMNS = ("loss_mask", "labels_mask")
"""Columns read as the loss mask without configuration, in this order of preference."""
_MASK_DTYPE = np.dtype("u1")


def column_types(schema: Any) -> dict[str, str]:
    """Every column's Arrow type as text (``{"id": "string", "loss_mask": "list<item:
    int8>"}``), kept in the shard's description so masks are chosen without a read."""
    return {field.name: str(field.type) for field in schema}


def _is_flag_list(kind: str) -> bool:
    """Whether an Arrow type's text is a list of integers or booleans."""
    if not kind.startswith(("list<", "large_list<")) or not kind.endswith(">"):
        return False
    value = kind.split(":", 1)[-1].strip(" >")
    return value == "bool" or value.lstrip("u").startswith("int")


def pick_mask_column(path: str, meta: dict[str, Any], configured: str | None) -> str | None:
    """The column of shard ``path`` (its description's ``meta``) read as its loss mask:
    ``configured``, else the first of :data:`MASK_COLUMNS` it holds, else ``None``.

    Raises:
        FormatError: the configured column is missing (the columns that exist are named),
            or the chosen column is not a list of integers or booleans (its type is named).
    """
    types: dict[str, str] | None = meta.get("column_types")
    if types is None:  # described before column types were recorded (catalog cache)
        types = {name: "list<item: int8>" for name in meta.get("list_columns", "").split(",")}
    found = (name for name in MASK_COLUMNS if name in types and name != meta.get("column"))
    column = configured or next(found, None)
    if column is None:
        return None
    if column not in types:
        raise FormatError(
            f"{path}: no column {column!r} to read as the loss mask (mask_column); the file "
            f"has columns {', '.join(types)}"
        )
    if not _is_flag_list(types[column]):
        raise FormatError(
            f"{path}: column {column!r} is {types[column]}; a loss mask is a list of 0/1 "
            "integers or booleans per row, one flag per token (set mask_column, or "
            'label_masks = "none" to train every token)'
        )
    return column


def mask_flags(values: Any) -> np.ndarray:
    """A mask column's values (a pyarrow array of integers or booleans) as ``uint8`` flags,
    nonzero where trained: 8-bit integers are viewed (no copy; -1 reads 255), booleans
    unpacked, wider integers copied to one byte per token, 0 and 1 kept and any other value
    2 (trained, and still not 0/1 to ``validate``)."""
    import pyarrow as pa

    if pa.types.is_boolean(values.type):
        return values.to_numpy(zero_copy_only=False).view(_MASK_DTYPE)
    flags = values.to_numpy(zero_copy_only=True)
    if flags.dtype.itemsize == 1:
        return flags.view(_MASK_DTYPE)
    return np.where((flags == 0) | (flags == 1), flags, 2).astype(_MASK_DTYPE)


def mask_lists(array: Any, column: str, where: str) -> tuple[Any, np.ndarray]:
    """The raw flag values (a pyarrow array; :func:`mask_flags` converts them) and the
    ``rows + 1`` list offsets of a mask column's list array.

    Raises:
        FormatError: not a list of integers or booleans, a null row or a null flag.
    """
    import pyarrow as pa

    kind = array.type
    listed = pa.types.is_list(kind) or pa.types.is_large_list(kind)
    value = kind.value_type if listed else None
    if value is None or not (pa.types.is_integer(value) or pa.types.is_boolean(value)):
        raise FormatError(
            f"{where}: column {column!r} is {kind}; a loss mask is a list of 0/1 integers or "
            "booleans per row"
        )
    return list_values(array, column, where, "loss-mask flag")


def check_row_lengths(
    tokens: np.ndarray, flags: np.ndarray, where: str, first_row: int, columns: tuple[str, str]
) -> None:
    """Every row holds as many mask flags as tokens.

    Args:
        tokens: The token column's list offsets (``rows + 1``, starting anywhere).
        flags: The mask column's list offsets, the same rows.
        where: The file (and piece) the message names.
        first_row: The file's row number of the first row (messages count from the file).
        columns: ``(token column, mask column)``.

    Raises:
        FormatError: naming the first row that differs and both lengths.
    """
    token_lengths, flag_lengths = np.diff(tokens), np.diff(flags)
    differ = np.flatnonzero(token_lengths != flag_lengths)
    if differ.size:
        row = int(differ[0])
        raise FormatError(
            f"{where}: row {first_row + row} has {int(token_lengths[row])} tokens in column "
            f"{columns[0]!r} but {int(flag_lengths[row])} flags in its loss-mask column "
            f"{columns[1]!r}; a loss mask holds one flag per token ({differ.size} row(s) "
            "differ)"
        )
