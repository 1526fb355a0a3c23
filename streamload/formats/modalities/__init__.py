"""Modalities packed ``.pbin`` files (``modalities data pack_encoded_data``).

* ``modalities`` — the format: reader, ``ModalitiesWriter``, merge (its pickled document
  index is decoded by the root's ``_pickle_subset``, never by :mod:`pickle`).

The package re-exports the names of :mod:`streamload.formats.modalities.modalities`: that module was
``streamload.formats.modalities`` before the formats were grouped by family, and imports of the old
path keep working.
"""

from streamload.formats.modalities.modalities import (
    FORMAT,
    HEADER_SIZE,
    MERGE_SHIFT,
    ModalitiesFormat,
    ModalitiesShard,
    ModalitiesWriter,
    PbinLayout,
    merge_pbin,
    read_pbin_layout,
    token_size_for_vocab,
)

__all__ = [
    "FORMAT",
    "HEADER_SIZE",
    "MERGE_SHIFT",
    "ModalitiesFormat",
    "ModalitiesShard",
    "ModalitiesWriter",
    "PbinLayout",
    "merge_pbin",
    "read_pbin_layout",
    "token_size_for_vocab",
]
