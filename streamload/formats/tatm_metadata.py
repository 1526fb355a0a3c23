"""A tatm folder's ``metadata.yaml``: the token dtype it declares (FORMATS §5.1).

tatm writes headerless ``.bin`` files (:mod:`streamload.formats.numpy.raw`) and records their
width in a ``metadata.yaml`` beside them, under ``tokenized_info.dtype``. The catalog reads it
once per folder (:func:`streamload.formats.sniff.folder_dtype`) before any format is chosen,
so it lives at the root of the formats, beside the sniffing it feeds.

Example: ``tokenized_info: {dtype: <u2}`` declares ``"uint16"``; a file without
``tokenized_info`` declares nothing (``None``).
"""

from __future__ import annotations

import numpy as np

from streamload.errors import FormatError

__all__ = ["TATM_METADATA", "tatm_dtype"]

TATM_METADATA = "metadata.yaml"
"""The name of tatm's metadata file, beside the token files of its folder."""


def tatm_dtype(metadata_text: str, metadata_path: str) -> str | None:
    """The token dtype a tatm ``metadata.yaml`` declares, or ``None`` if it declares none.

    Raises:
        FormatError: not YAML (or nested too deep to parse), or a ``tokenized_info.dtype``
            that is not a little-endian integer dtype.
    """
    import yaml

    try:
        meta = yaml.safe_load(metadata_text)
    except (yaml.YAMLError, RecursionError) as exc:
        reason = "nested too deep" if isinstance(exc, RecursionError) else exc
        raise FormatError(f"{metadata_path}: cannot parse YAML: {reason}") from None
    info = meta.get("tokenized_info") if isinstance(meta, dict) else None
    dtype = info.get("dtype") if isinstance(info, dict) else None
    if dtype is None:
        return None
    try:
        parsed = np.dtype(str(dtype))
    except (TypeError, ValueError):
        parsed = None
    if parsed is None or parsed.kind not in "ui" or parsed.byteorder == ">":
        raise FormatError(
            f"{metadata_path}: tokenized_info.dtype = {dtype!r}; expected a little-endian "
            "integer dtype such as uint16 or uint32"
        )
    return parsed.name
