"""A table's loss-mask and id columns beside its token column (Hugging Face rows).

A tokenized SFT dataset often carries, beside ``input_ids``, a list column of the same shape
that says which tokens are trained, and a scalar ``id`` column. Flag columns (1 = trained):
``loss_mask``, ``labels_mask``, TRL's ``assistant_masks`` (``assistant_only_loss``,
transformers' ``return_assistant_tokens_mask``) and ``completion_mask`` (prompt-completion
data). The ``labels`` column of ``transformers`` / TRL is read as the mask ``labels != -100``
(:func:`label_flags`): before the shift, ``labels[i]`` is ``input_ids[i]`` where token ``i``
is trained as a target and -100 where it is not, so it must be a masked copy of the tokens
(anything else is refused naming the row, position and both values).

The mask column is read as the shard's loss mask (docs/formats.md "Loss masks"): the
mask shard is the token file itself read through the mask column
(:func:`streamload.formats.loss_mask.mask_shard` marks it ``mask_of`` the token column), its
values as ``uint8`` flags, nonzero = trained. ``attention_mask`` is never a loss mask (it
marks padding, not prompts) and is never picked by itself.

Which column, per shard (:func:`pick_mask_column`, from what describing recorded in the
shard's ``meta["column_types"]``, so no file is read at start-up): the source's
``mask_column`` (required in every file), else the first of :data:`MASK_COLUMNS` the file
has (a ``labels`` column that is not a list of integers, a classification label, is not
picked). Each row's flags must be as many as the row's tokens (:func:`check_row_lengths`,
checked where the mask is read: at open for Arrow, per row group for Parquet).

Example: rows of 3 and 2 tokens, mask column ``[[0, 1, 1], [1, 1]]``: offsets ``[0, 3, 5]``
on both sides, flags ``[0, 1, 1, 1, 1]``; a mask row ``[1]`` in place of ``[1, 1]`` is
refused naming row 1, 2 tokens and 1 flag. A ``labels`` row ``[-100, 17, 0]`` for tokens
``[5, 17, 0]`` reads ``[0, 1, 1]``; ``[-100, 18, 0]`` is refused (position 1: label 18,
token 17).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from streamload.errors import FormatError
from streamload.formats.arrow.columns import list_values

__all__ = [
    "IGNORE_INDEX",
    "LABELS_COLUMN",
    "MASK_COLUMNS",
    "RowName",
    "check_row_lengths",
    "column_types",
    "label_flags",
    "mask_flags",
    "mask_lists",
    "mask_values",
    "pick_mask_column",
]

LABELS_COLUMN = "labels"
"""The column read with the labels convention (:func:`label_flags`), configured or found."""
IGNORE_INDEX = -100
"""A label that is not trained (PyTorch's ``cross_entropy`` ``ignore_index``)."""
MASK_COLUMNS = ("loss_mask", "labels_mask", LABELS_COLUMN, "assistant_masks", "completion_mask")
"""Columns read as the loss mask without configuration, in this order of preference. The
names read before ``labels``, ``assistant_masks`` and ``completion_mask`` were (issue 33)
come first, so a file that has one of them keeps the mask it had; ``labels`` (what the
model's loss reads) before TRL's two flag columns, and ``assistant_masks`` (the assistant's
turns) before ``completion_mask`` (the whole completion, which may hold several turns)."""
_MASK_DTYPE = np.dtype("u1")

RowName = Callable[[int], str]
"""How a message names row ``r`` of a file: ``row r`` for a table, ``line n`` for JSONL."""


def _row(row: int) -> str:
    return f"row {row}"


def column_types(schema: Any) -> dict[str, str]:
    """Every column's Arrow type as text (``{"id": "string", "loss_mask": "list<item:
    int8>"}``), kept in the shard's description so masks are chosen without a read."""
    return {field.name: str(field.type) for field in schema}


def _is_flag_list(kind: str) -> bool:
    """Whether an Arrow type's text is a list of integers or booleans."""
    if not kind.startswith(("list<", "large_list<")) or not kind.endswith(">"):
        return False
    value = kind.split(":", 1)[-1].strip(" >")
    return value == "bool" or _is_integer(value)


def _is_integer(value: str) -> bool:
    return value.lstrip("u").startswith("int")


def _is_label_list(kind: str) -> bool:
    """Whether an Arrow type's text is a list of integers (labels hold token ids)."""
    return _is_flag_list(kind) and kind.split(":", 1)[-1].strip(" >") != "bool"


def _picked(name: str, types: dict[str, str], token_column: Any) -> bool:
    """Whether column ``name`` is read as the mask by its name: present, not the tokens,
    and for ``labels`` a list of integers (a scalar ``labels`` is a class label)."""
    if name not in types or name == token_column:
        return False
    return name != LABELS_COLUMN or _is_label_list(types[name])


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
    found = (name for name in MASK_COLUMNS if _picked(name, types, meta.get("column")))
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
    if column == LABELS_COLUMN and not _is_label_list(types[column]):
        raise FormatError(
            f"{path}: column {column!r} is {types[column]}; labels are a list of token ids per "
            f"row, {IGNORE_INDEX} where not trained"
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
    tokens: np.ndarray,
    flags: np.ndarray,
    where: str,
    first_row: int,
    columns: tuple[str, str],
    row_name: RowName = _row,
) -> None:
    """Every row holds as many mask flags as tokens.

    Args:
        tokens: The token column's list offsets (``rows + 1``, starting anywhere).
        flags: The mask column's list offsets, the same rows.
        where: The file (and piece) the message names.
        first_row: The file's row number of the first row (messages count from the file).
        columns: ``(token column, mask column)``.
        row_name: How the message names a row (``row 3``; a JSONL file's ``line 4``).

    Raises:
        FormatError: naming the first row that differs and both lengths.
    """
    token_lengths, flag_lengths = np.diff(tokens), np.diff(flags)
    differ = np.flatnonzero(token_lengths != flag_lengths)
    if differ.size:
        row = int(differ[0])
        raise FormatError(
            f"{where}: {row_name(first_row + row)} has {int(token_lengths[row])} tokens in column "
            f"{columns[0]!r} but {int(flag_lengths[row])} flags in its loss-mask column "
            f"{columns[1]!r}; a loss mask holds one flag per token ({differ.size} row(s) "
            "differ)"
        )


def label_flags(
    labels: Any,
    tokens: np.ndarray,
    offsets: np.ndarray,
    path: str,
    first_row: int,
    columns: tuple[str, str],
    row_name: RowName = _row,
) -> np.ndarray:
    """A ``labels`` column's values as ``uint8`` flags, 1 where the label is not
    :data:`IGNORE_INDEX`, after checking they are a masked copy of the tokens.

    Args:
        labels: The labels' values (a pyarrow integer array), as many as ``tokens``.
        tokens: The token column's values, the same rows.
        offsets: The rows' list offsets (``rows + 1``, starting anywhere).
        path: The file the message names.
        first_row: The file's row number of the first row.
        columns: ``(token column, labels column)``.
        row_name: How the message names a row (``row 3``; a JSONL file's ``line 4``).

    Raises:
        FormatError: a label that is neither -100 nor the token at its position, naming the
            row, the position in the row and both values.
    """
    values = labels.to_numpy(zero_copy_only=False)
    trained = values != IGNORE_INDEX
    bad = np.flatnonzero(trained & (values.astype(np.int64) != tokens.astype(np.int64)))
    if bad.size:
        at = int(bad[0])
        starts = offsets - offsets[0]
        row = int(np.searchsorted(starts, at, side="right")) - 1
        last_row = first_row + starts.size - 2
        raise FormatError(
            f"{path}: {row_name(first_row + row)}, position {at - int(starts[row])}: column "
            f"{columns[1]!r} holds {int(values[at])} but the token in {columns[0]!r} is "
            f"{int(tokens[at])}; labels must be a masked copy of the tokens ({IGNORE_INDEX} "
            "where not trained, else the token itself, before any shift: the transformers "
            f"convention; {bad.size} label(s) differ, between {row_name(first_row)} and "
            f"{row_name(last_row)}). Labels "
            'already shifted by one are not read; set label_masks = "none" to ignore them'
        )
    return trained.view(_MASK_DTYPE)


def mask_values(
    column: str,
    flags: Any,
    tokens: np.ndarray,
    offsets: np.ndarray,
    where: tuple[str, int],
    mask_of: str,
    row_name: RowName = _row,
) -> np.ndarray:
    """Mask column ``column``'s values (:func:`mask_lists`) as ``uint8`` flags: a
    ``labels`` column by :func:`label_flags` against ``tokens`` (its rows' values, list
    ``offsets``; ``where``: the file and its row number of the first row; ``mask_of``: the
    token column; ``row_name``: how messages name a row), any other by :func:`mask_flags`."""
    if column != LABELS_COLUMN:
        return mask_flags(flags)
    return label_flags(flags, tokens, offsets, where[0], where[1], (mask_of, column), row_name)
