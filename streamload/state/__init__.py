"""The one state of a position in the stream, for every entry point.

``StreamLoader.state_dict()``, ``StreamDataset.state_dict()`` (each worker's copy),
``PlanChunks.get_state()`` (inside the torchdata node chain's state) and DCP all save the same
versioned, fingerprinted envelope (:mod:`streamload.state.envelope`, which documents its
fields and loading rules), and all load through :func:`load_position`, which also reads the
shapes saved before the envelope was shared (:mod:`streamload.state.legacy`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from streamload.state.envelope import (
    STATE_VERSION,
    UPGRADERS,
    LoadedState,
    load_state,
    make_state,
    read_state,
)
from streamload.state.fingerprint import MAX_FINGERPRINT_DEPTH, check_fingerprint
from streamload.state.legacy import load_legacy

if TYPE_CHECKING:
    from streamload.streams.interface import SampleStream

__all__ = [
    "MAX_FINGERPRINT_DEPTH",
    "STATE_VERSION",
    "UPGRADERS",
    "LoadedState",
    "check_fingerprint",
    "load_position",
    "load_state",
    "make_state",
    "read_state",
]


def load_position(
    state: Any,
    stream: SampleStream,
    *,
    global_batch: int,
    ignore_fingerprint_mismatch: bool = False,
    slack: int = 0,
) -> LoadedState:
    """Check a saved state of any entry point against ``stream`` and return its position.

    Args:
        state: An envelope (any version), or a shape saved before it was shared.
        stream: The stream it is loaded into.
        global_batch: The reader's samples per global batch (``world_size x batch_size``).
        ignore_fingerprint_mismatch: Load a state saved for other data or settings (its
            derived fields are not checked then).
        slack: Samples the position may lie past the pass end (``StreamDataset`` workers).

    Raises:
        StateError: malformed, too new, saved for other data or config, or a position this
            stream cannot stand at; the message names the field, its value and what was
            expected.
    """
    if isinstance(state, Mapping) and "version" not in state:
        legacy = load_legacy(state, stream, global_batch, slack)
        if legacy is not None:
            return legacy
    return load_state(state, stream, ignore_fingerprint_mismatch, slack)
