"""Megatron-LM / Megatron-Core ``IndexedDataset``: a ``.bin`` of tokens and its ``.idx``.

* ``megatron`` — the format: reader, ``MegatronWriter``, merge;
* ``_index`` — the ``.idx`` ("MMIDIDX") index: parse, validate, write.

The package re-exports the names of :mod:`streamload.formats.megatron.megatron`: that module was
``streamload.formats.megatron`` before the formats were grouped by family, and imports of the old
path keep working.
"""

from streamload.formats.megatron.megatron import (
    FORMAT,
    MegatronFormat,
    MegatronShard,
    MegatronWriter,
    code_of_dtype,
    merge_megatron,
    read_index,
)

__all__ = [
    "FORMAT",
    "MegatronFormat",
    "MegatronShard",
    "MegatronWriter",
    "code_of_dtype",
    "merge_megatron",
    "read_index",
]
