"""Readers of the position shapes saved before the one envelope (issue 30): what
``StreamDataset`` and ``PlanChunks`` saved until then, read into the same checked position.

* ``StreamDataset``: ``{"cursor": NODE, "batch": int | None, "fingerprint": {...}}``.
* ``PlanChunks`` (the node chain): ``NODE = {"pass", "sample", "mixture"}`` and, inside an
  optimizer step, ``"in_step": [done, size]``; ``mixture`` is ``None`` or ``{"step",
  "drawn", "phase_step", "phase_drawn", "batch_sizes"}`` (lists in source order).

Both are checked as strictly as the envelope (types, keys, a position the stream can stand at,
the fingerprint where the shape has one) and never written any more.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from streamload.plan.mixture import MixtureCursor
from streamload.state.envelope import LoadedState
from streamload.state.fingerprint import check_fingerprint
from streamload.streams.cursor import (
    CursorFields,
    StreamCursor,
    check_cursor,
    read_batch_sizes,
    read_in_step,
    state_int,
    state_ints,
    state_mapping,
)

if TYPE_CHECKING:
    from streamload.streams.interface import SampleStream

__all__ = ["DATASET_KEYS", "NODE_FIELDS", "load_legacy", "read_node_cursor"]

DATASET_KEYS = ("cursor", "batch", "fingerprint")
"""The keys of a ``StreamDataset`` state before the envelope."""

NODE_FIELDS = CursorFields(
    pass_index="cursor.pass",
    sample="cursor.sample",
    step="cursor.mixture.step",
    phase_step="cursor.mixture.phase_step",
    batch_sizes="cursor.mixture.batch_sizes",
    drawn=lambda i, name: f"cursor.mixture.drawn[{i}] ({name})",
    phase_drawn=lambda i, name: f"cursor.mixture.phase_drawn[{i}] ({name})",
)
"""Field names of a node position in messages."""


def load_legacy(
    state: Mapping[str, Any], stream: SampleStream, global_batch: int, slack: int = 0
) -> LoadedState | None:
    """The checked position of a pre-envelope state, or ``None`` if ``state`` has neither
    shape.

    Args:
        state: The saved mapping.
        stream: The stream it is loaded into.
        global_batch: The reader's samples per global batch (a mixture state saved before
            ``batch_sizes`` were recorded used it throughout).
        slack: Samples the position may lie past the pass end (``StreamDataset`` workers).

    Raises:
        StateError: malformed, saved for another stream, or an impossible position.
    """
    if set(state) == set(DATASET_KEYS):
        cursor = read_node_cursor(state["cursor"], global_batch)
        batch = state["batch"]
        batches = 0 if batch is None else state_int(batch, "batch")
        check_fingerprint(state["fingerprint"], stream.fingerprint(cursor), False)
        check_cursor(stream, cursor, NODE_FIELDS, slack=slack)
        return LoadedState(cursor, batches)
    if "pass" in state and "sample" in state:
        cursor = read_node_cursor(state, global_batch)
        check_cursor(stream, cursor, NODE_FIELDS, slack=slack)
        return LoadedState(cursor, -(-cursor.sample // global_batch))
    return None


def read_node_cursor(state: Any, global_batch: int | None = None) -> StreamCursor:
    """A node position (the module's shape), strictly.

    Raises:
        StateError: a malformed field, named.
    """
    field = "cursor"
    state = state_mapping(state, field, ("pass", "sample", "mixture"), ("in_step",))
    done, size = read_in_step(state.get("in_step"), f"{field}.in_step")
    m = state["mixture"]
    mixture = None
    if m is not None:
        where = f"{field}.mixture"
        keys = ("step", "drawn", "phase_step", "phase_drawn")
        m = state_mapping(m, where, keys, ("batch_sizes",))
        step = state_int(m["step"], f"{where}.step")
        mixture = MixtureCursor(
            step,
            state_ints(m["drawn"], f"{where}.drawn"),
            state_int(m["phase_step"], f"{where}.phase_step"),
            state_ints(m["phase_drawn"], f"{where}.phase_drawn"),
            read_batch_sizes(m.get("batch_sizes"), f"{where}.batch_sizes", step, global_batch),
        )
    pass_index = state_int(state["pass"], f"{field}.pass")
    sample = state_int(state["sample"], f"{field}.sample")
    return StreamCursor(pass_index, sample, mixture, done, size)
