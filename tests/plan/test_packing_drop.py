"""``long_documents = "drop"`` (issue 33): a document longer than ``seq_len + 1`` gives no
item and is counted; the plan key gains "drop" as a new value only."""

from __future__ import annotations

import numpy as np

from streamload.plan.packing import document_items


def test_the_module_docstrings_example() -> None:
    bounds = np.cumsum([0, 7, 1, 0, 5, 3, 2])
    items = document_items(bounds, 4, "drop")
    assert items.lengths.tolist() == [1, 5, 3, 2]
    assert items.starts.tolist() == [7, 8, 13, 16]
    assert (items.documents, items.dropped_documents, items.dropped_tokens) == (5, 1, 7)
    assert items.cut_items.size == 0 and items.truncated_tokens == 0


def test_without_long_documents_drop_is_split() -> None:
    bounds = np.cumsum([0, 5, 1, 0, 3])
    drop, split = document_items(bounds, 4, "drop"), document_items(bounds, 4, "split")
    assert drop.starts.tolist() == split.starts.tolist()
    assert drop.lengths.tolist() == split.lengths.tolist()
    assert drop.dropped_documents == 0
