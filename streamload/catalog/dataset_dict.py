"""A Hugging Face ``DatasetDict`` root named as a source's path: the hint that names its
split folders (the folder itself holds no token files)."""

from __future__ import annotations

import posixpath
from typing import Any

__all__ = ["DATASET_DICT", "dataset_dict_hint"]


DATASET_DICT = "dataset_dict.json"
"""What ``DatasetDict.save_to_disk`` writes at its root: ``{"splits": [...]}``, one
``save_to_disk`` folder per split beside it."""


def dataset_dict_hint(fs: Any, entry: str, raw: str) -> str:
    """For a Hugging Face ``DatasetDict`` root (no token file of its own), the split folders
    found in it and the ``path`` to write instead; else ``""``. Only on the error path, so
    any failure to look just leaves the hint out."""
    try:
        if not fs.isfile(f"{entry.rstrip('/')}/{DATASET_DICT}"):
            return ""
        listed = fs.ls(entry, detail=True)
        splits = sorted(
            posixpath.basename(i["name"].rstrip("/"))
            for i in listed
            if i.get("type") == "directory"
        )
    except Exception:  # a hint, never a second error
        return ""
    if not splits:
        return f"; it is a Hugging Face DatasetDict ({DATASET_DICT}) without split folders"
    return (
        f"; it is a Hugging Face DatasetDict ({DATASET_DICT}) whose splits are the folders "
        f"{', '.join(splits)}: set path = {raw.rstrip('/') + '/' + splits[0]!r} (one split "
        "per source)"
    )
