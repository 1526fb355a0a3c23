"""The loader state envelope: version, fingerprint, cursor; and its checks and upgraders.

Example (``num_samples`` unset, 2 windows of 4 consumed in epoch 1)::

    {"version": 1,
     "fingerprint": {"algorithm": ..., "seq_len": 2048, "seed": 1234, "data": {"web": "ab12…"}, …},
     "epoch": 1,
     "cursor": {"samples": 2, "tokens": 4096, "batches": 1},
     "sources": {"web": {"epoch": 1, "samples": 6}},
     "global_batch_size": 2}

* ``epoch``: passes completed (a pass is ``num_samples`` samples, or one epoch without it).
* ``cursor.samples``: samples of the current pass consumed by the training loop (what was
  delivered, never what was prefetched); ``tokens`` = samples × seq_len; ``batches``:
  batches delivered in this pass by this loader since it started or was restored.
* ``sources``: per source, the index of its next sample in the source's own sequence of
  samples (``samples``; it counts across epochs) and that sample's data ``epoch``. Derived from
  ``epoch`` and ``cursor`` and checked against them on load.
* ``global_batch_size``: informational; a loader with another global batch size may load the
  state and continues at exactly ``cursor.samples``.
* Mixtures only: ``cursor.step`` (global batches so far) and ``schedule``
  (``phase_step``: where the current phase's accounting started, ``phase_drawn``: each
  source's count then). With ``sources[*].samples`` they are the whole mixture position.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from streamload.errors import StateError
from streamload.plan.mixture import MixtureCursor
from streamload.streams.cursor import StreamCursor

if TYPE_CHECKING:
    from streamload.streams.interface import SampleStream

__all__ = [
    "STATE_VERSION",
    "UPGRADERS",
    "check_fingerprint",
    "cursor_from_state",
    "make_state",
    "read_state",
]

STATE_VERSION = 1

UPGRADERS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}
"""``UPGRADERS[n]`` turns a version-n state into a version-(n+1) state."""


def make_state(
    *,
    fingerprint: dict[str, Any],
    cursor: StreamCursor,
    batches: int,
    seq_len: int,
    global_batch: int,
    sources: dict[str, dict[str, int]],
) -> dict[str, Any]:
    """Build the envelope (plain JSON-safe ints, strings, lists, dicts)."""
    samples = cursor.sample
    state: dict[str, Any] = {
        "version": STATE_VERSION,
        "fingerprint": fingerprint,
        "epoch": cursor.pass_index,
        "cursor": {"samples": samples, "tokens": samples * seq_len, "batches": batches},
        "sources": sources,
        "global_batch_size": global_batch,
    }
    mixture = cursor.mixture
    if mixture is not None:
        names = list(sources)
        state["cursor"]["step"] = mixture.step
        state["schedule"] = {
            "phase_step": mixture.phase_step,
            "phase_drawn": dict(zip(names, mixture.phase_drawn, strict=True)),
        }
    return state


def cursor_from_state(state: Mapping[str, Any], stream: SampleStream) -> StreamCursor:
    """The stream cursor a (read, upgraded) state describes, checked against the stream.

    Raises:
        StateError: a cursor beyond the pass, sources that are not the stream's, per-source
            positions that disagree with the cursor, or mixture fields missing.
    """
    samples, epoch = state["cursor"]["samples"], state["epoch"]
    length = stream.pass_length
    if length is not None and samples > length:
        raise StateError(
            f"state cursor.samples = {samples} lies beyond the pass of {length} samples; "
            "the state was edited or saved for another num_samples"
        )
    saved = state.get("sources") or {}
    names = [s.name for s in stream.sources]
    if sorted(saved) != sorted(names):
        raise StateError(f"state sources {sorted(saved)} are not this stream's sources {names}")
    mixture = None
    if stream.is_mixture:
        try:
            schedule = state["schedule"]
            drawn = tuple(int(saved[n]["samples"]) for n in names)
            phase = tuple(int(schedule["phase_drawn"][n]) for n in names)
            step, phase_step = int(state["cursor"]["step"]), int(schedule["phase_step"])
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(
                f"state lacks the mixture position ({exc!r}); saved without mixing?"
            ) from None
        mixture = MixtureCursor(step, drawn, phase_step, phase)
    cursor = StreamCursor(epoch, samples, mixture)
    expected = stream.source_positions(cursor)
    if saved != expected:
        raise StateError(
            f"state sources = {saved} disagree with epoch {epoch} and cursor.samples "
            f"{samples}, which give {expected}; the state was edited or is corrupt"
        )
    return cursor


def read_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the envelope's shape and upgrade it to the current version.

    Raises:
        StateError: not a streamload state, a newer version, or missing fields.
    """
    if not isinstance(state, Mapping) or "version" not in state:
        raise StateError(f"not a streamload loader state (no 'version' key): {_short(state)}")
    version = state["version"]
    if not isinstance(version, int) or version < 1:
        raise StateError(f"state version {version!r} is not a positive integer")
    if version > STATE_VERSION:
        raise StateError(
            f"state version {version} is newer than this streamload understands "
            f"({STATE_VERSION}); upgrade streamload"
        )
    current = dict(state)
    while current["version"] < STATE_VERSION:
        current = UPGRADERS[current["version"]](current)
    for key in ("fingerprint", "epoch", "cursor"):
        if key not in current:
            raise StateError(f"state is missing {key!r}")
    samples = current["cursor"].get("samples") if isinstance(current["cursor"], Mapping) else None
    if not isinstance(samples, int) or samples < 0:
        raise StateError(f"state cursor.samples = {samples!r} must be an integer >= 0")
    if not isinstance(current["epoch"], int) or current["epoch"] < 0:
        raise StateError(f"state epoch = {current['epoch']!r} must be an integer >= 0")
    return current


def check_fingerprint(saved: Mapping[str, Any], current: Mapping[str, Any], ignore: bool) -> None:
    """Raise naming every field that differs, unless ``ignore``.

    Raises:
        StateError: the state was saved for other data or another order-changing config.
    """
    keys = sorted(set(saved) | set(current))
    diffs = [k for k in keys if saved.get(k) != current.get(k)]
    if not diffs or ignore:
        return
    parts = []
    for key in diffs:
        if key == "data":
            changed = _changed_sources(saved.get(key) or {}, current.get(key) or {})
            parts.append(f"data of source(s) {', '.join(changed)} (files, sizes or dtypes)")
        else:
            parts.append(f"{key}: saved {saved.get(key)!r}, now {current.get(key)!r}")
    raise StateError(
        "the state was saved for a different stream — " + "; ".join(parts) + ". Resuming would "
        "not continue on the next sample; pass ignore_fingerprint_mismatch=True if you mean it"
    )


def _changed_sources(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    return sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 80 else text[:77] + "..."
