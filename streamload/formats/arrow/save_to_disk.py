"""A ``datasets.save_to_disk`` folder's own record of its files, checked against the listing.

``save_to_disk`` writes, beside its ``data-0000K-of-0000N.arrow`` files, ``state.json``
(``_data_files``: the Arrow files of the dataset, in row order) and ``dataset_info.json``
(``features``: each column's type). When a listed folder holds ``state.json`` and Arrow files,
the catalog (:mod:`streamload.catalog.listing`) reads both (two small files per folder) and:

* refuses a folder whose Arrow files are not exactly those ``state.json`` lists (a file lost
  in a copy, or one left over from an earlier save), naming the missing and extra files;
* lists the files in ``state.json``'s order, which is the dataset's row order;
* refuses a token column whose feature is not a list of integers (``List``/``Sequence``/
  ``LargeList`` of an ``int*``/``uint*`` ``Value``), naming the feature found.

Example: ``_data_files = [{"filename": "data-00000-of-00002.arrow"}, {"filename":
"data-00001-of-00002.arrow"}]`` and a listing of ``data-00000-of-00002.arrow`` only is refused:
``data-00001-of-00002.arrow`` is missing.
"""

from __future__ import annotations

import json
from typing import Any

from streamload.errors import FormatError

__all__ = ["INFO_FILE", "STATE_FILE", "check_data_files", "check_token_feature", "data_files"]

STATE_FILE = "state.json"
"""The file of a ``save_to_disk`` folder that lists its Arrow files."""
INFO_FILE = "dataset_info.json"
"""The file of a ``save_to_disk`` folder that gives its features (column types)."""
_LIST_TYPES = ("List", "Sequence", "LargeList")
"""``_type`` of a ``datasets`` feature that holds a list per row."""


def _parse(text: bytes, where: str) -> Any:
    try:
        return json.loads(text)
    except (UnicodeDecodeError, ValueError) as exc:
        raise FormatError(f"{where}: not readable JSON ({exc}); the file is truncated") from exc


def data_files(text: bytes, where: str) -> list[str]:
    """The Arrow file names a ``state.json`` (its bytes; ``where`` its path) lists, in order.

    Raises:
        FormatError: not JSON, or without a ``_data_files`` list of ``{"filename": ...}``.
    """
    state = _parse(text, where)
    entries = state.get("_data_files") if isinstance(state, dict) else None
    listed = entries if isinstance(entries, list) else [None]
    names = [e.get("filename") if isinstance(e, dict) else None for e in listed]
    if not names or not all(isinstance(n, str) and n for n in names):
        raise FormatError(
            f"{where}: expected a datasets state with a _data_files list of "
            '{"filename": ...} entries; found something else'
        )
    return [str(n) for n in names]


def is_cache_file(name: str) -> bool:
    """Whether a file of a saved dataset's folder is one of the cache files ``datasets``
    writes there for ``map``/``filter`` results (``cache-<fingerprint>.arrow``): not data
    of the saved dataset, never listed in its ``state.json``."""
    return name.startswith("cache-") and name.endswith(".arrow")


def check_data_files(listed: list[str], expected: list[str], folder: str) -> None:
    """The Arrow files listed in ``folder`` must be exactly the ``expected`` ones.

    Raises:
        FormatError: naming the files ``state.json`` lists that are missing, and those
            present that it does not list.
    """
    missing = [n for n in expected if n not in set(listed)]
    extra = sorted(set(listed) - set(expected))
    if missing or extra:
        found = [f"missing {', '.join(missing)}"] if missing else []
        found += [f"not listed there: {', '.join(extra)}"] if extra else []
        raise FormatError(
            f"{folder}: its {STATE_FILE} lists {len(expected)} Arrow files but the folder "
            f"holds {len(listed)} ({'; '.join(found)}); the copy is incomplete or mixes two "
            "saves"
        )


def check_token_feature(text: bytes, column: str, where: str) -> None:
    """The token ``column`` of a ``dataset_info.json`` (its bytes) is a list of integers.

    A column the features do not name is left to the Arrow reader (which names the columns
    the file has).

    Raises:
        FormatError: not JSON, or the column's feature is another type (named).
    """
    info = _parse(text, where)
    features = info.get("features") if isinstance(info, dict) else None
    if not isinstance(features, dict) or column not in features:
        return
    feature = features[column]
    if isinstance(feature, list) and len(feature) == 1:  # datasets < 2.0 wrote [Value]
        value = feature[0]
    elif isinstance(feature, dict) and feature.get("_type") in _LIST_TYPES:
        value = feature.get("feature")
    else:
        value = None
    dtype = value.get("dtype") if isinstance(value, dict) else None
    if not (isinstance(dtype, str) and dtype.lstrip("u").startswith("int")):
        raise FormatError(
            f"{where}: feature {column!r} is {json.dumps(feature)}; the token column must be "
            "a list of integers (List of Value int32, uint16...)"
        )
