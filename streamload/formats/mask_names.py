"""Where a token file's per-token loss mask lives, by name (FORMATS "Loss masks").

A loss mask is headerless, one byte per token of its token file, nonzero where the token is
trained as a label. Two naming conventions, one per tool that writes masks:

* OLMo-core / open-instruct: a token file named ``token_ids<rest>`` has its mask in
  ``labels_mask<rest>`` beside it (``token_ids_part_0003.npy`` → ``labels_mask_part_0003.npy``);
* every other token file ``F`` has its mask in ``F.loss`` (datatrove's rule, ``X.ds`` →
  ``X.ds.loss``, applied to any name: dolma's ``part-0-00000.npy`` → ``part-0-00000.npy.loss``,
  Megatron's ``corpus.bin`` → ``corpus.bin.loss``).

``F.loss`` keeps the whole token file name, so two token files never share a mask name (a
stem-based ``part.labels_mask.npy`` would serve ``part.npy`` and ``part.bin`` alike), and its
suffix is no token-file suffix, so a folder listing never takes a mask for a shard.

Example:
    >>> mask_path_for("/data/token_ids_part_0003.npy")
    '/data/labels_mask_part_0003.npy'
    >>> mask_path_for("s3://b/train/00000.ds")
    's3://b/train/00000.ds.loss'
    >>> mask_conventions("part-0-00000.npy", frozenset({"part-0-00000.npy.loss"}))
    'part-0-00000.npy.loss'
"""

from __future__ import annotations

import posixpath
from collections.abc import Collection

__all__ = [
    "LOSS_SUFFIX",
    "MASK_PREFIX",
    "TOKEN_PREFIX",
    "is_mask_name",
    "mask_conventions",
    "mask_name_for",
    "mask_path_for",
]

TOKEN_PREFIX = "token_ids"
"""OLMo-core's token file name prefix (``token_ids_part_0000.npy``)."""
MASK_PREFIX = "labels_mask"
"""OLMo-core's mask file name prefix, replacing :data:`TOKEN_PREFIX`."""
LOSS_SUFFIX = ".loss"
"""The mask suffix appended to any other token file name (datatrove's ``.ds.loss``)."""


def mask_name_for(basename: str) -> str:
    """The conventional mask file name of the token file named ``basename`` (no folder)."""
    if basename.startswith(TOKEN_PREFIX) and len(basename) > len(TOKEN_PREFIX):
        return MASK_PREFIX + basename[len(TOKEN_PREFIX) :]
    return basename + LOSS_SUFFIX


def mask_path_for(path: str) -> str:
    """The conventional mask path of the token file at ``path`` (local or a URL), beside it.

    Only the last path component changes (``/`` separated, as in fsspec and on POSIX).
    """
    folder, sep, basename = path.rpartition("/")
    if not basename:
        raise ValueError(f"{path!r}: a token file path must end in a file name")
    return folder + sep + mask_name_for(basename)


def mask_conventions(basename: str, siblings: Collection[str]) -> str | None:
    """The mask sibling of the token file ``basename`` if the listing ``siblings`` (names in
    the same folder) holds it under the conventional name, else ``None``."""
    name = mask_name_for(posixpath.basename(basename))
    return name if name in siblings else None


def is_mask_name(basename: str) -> bool:
    """Whether ``basename`` is named like a mask file (``labels_mask…`` or ``….loss``), so a
    folder listing can leave it out of the token files."""
    return basename.startswith(MASK_PREFIX) or basename.endswith(LOSS_SUFFIX)
