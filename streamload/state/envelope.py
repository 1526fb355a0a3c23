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
  batches delivered in this pass (a restored loader continues the saved count).
* ``sources``: per source, the index of its next sample in the source's own sequence of
  samples (``samples``; it counts across epochs) and that sample's data ``epoch``. Derived from
  ``epoch`` and ``cursor`` and checked against them on load.
* ``global_batch_size``: samples per optimizer step (``grad_accum_steps × world_size ×
  batch_size``; with a batch size schedule, the size of the step at the cursor);
  informational at a step boundary: a loader with another one may load the state and
  continues at exactly ``cursor.samples``.
* ``cursor.in_step`` (only inside an optimizer step, ``grad_accum_steps > 1``): samples of
  the step in progress already delivered; that step holds ``global_batch_size`` samples, and
  a loader continues there only with the same step size, in global batches (``world_size ×
  batch_size``) that divide the step's rest (:func:`streamload.streams.cursor.check_step_resume`).
* Mixtures only: ``cursor.step`` (optimizer steps completed) and ``schedule``
  (``phase_step``: where the current phase's accounting started, ``phase_drawn``: each
  source's count then, ``batch_sizes``: ``[first step, global batch size]`` of each run of
  equal sizes; inside a step, all at the step's start, and ``step_drawn``: each source's
  count then, while ``sources`` counts what was delivered). The per-source counts and
  ``schedule`` are derived from ``cursor.step`` and ``batch_sizes`` and checked on load:
  replayed (:func:`streamload.plan.mixture.replay_cursor`) while that is cheap, else against
  the bounds every position of the step satisfies
  (:func:`streamload.plan.mixture.cursor_bounds`, O(sources);
  :data:`streamload.streams.cursor.MAX_REPLAYED`); a state saved before ``batch_sizes``
  existed is taken to have used ``global_batch_size`` throughout.

Loading rules (:func:`load_state`; every violation is a ``StateError`` naming the field, the
value and the expectation, raised before the loader changes):

* the state is a mapping with exactly the keys above; ``version`` is an ``int`` from 1 to
  :data:`STATE_VERSION` (older ones are upgraded);
* integer fields are integers (not ``bool``, ``float`` or ``str``), ``>= 0`` (``>= 1`` for
  ``global_batch_size``) and below 2**62 (:mod:`streamload.streams.cursor`);
  ``cursor.tokens == cursor.samples × seq_len`` and ``cursor.batches <= cursor.samples``;
* the fingerprint is a mapping of plain values (strings, numbers, booleans, ``None``, lists,
  mappings; nested at most :data:`MAX_FINGERPRINT_DEPTH` deep) and equals this stream's,
  field by field and type by type (``5.0`` or ``True`` is not the seed ``5``), unless
  ``ignore_fingerprint_mismatch``; then the fields derived from the history (sources,
  schedule, tokens) are not checked, since they were made with other settings;
* the position is one the stream can stand at: inside the pass, a later pass of a Megatron
  stream only at 0, every derived field equal to its derivation (a long mixture position:
  within its bounds).

A loaded state is normalized once (plain ``int``) and echoed: ``state_dict()`` right after
``load_state_dict(s)`` returns ``s`` for a state this version saved.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamload.errors import StateError
from streamload.plan.mixture import MixtureCursor
from streamload.state.fingerprint import check_fingerprint
from streamload.streams.cursor import (
    CursorFields,
    StreamCursor,
    check_cursor,
    read_batch_sizes,
    short_repr,
    state_int,
    state_mapping,
)

if TYPE_CHECKING:
    from streamload.streams.interface import SampleStream

__all__ = [
    "STATE_KEYS",
    "STATE_VERSION",
    "UPGRADERS",
    "LoadedState",
    "load_state",
    "make_state",
    "read_state",
]

STATE_VERSION = 1

UPGRADERS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}
"""``UPGRADERS[n]`` turns a version-n state into a version-(n+1) state."""

STATE_KEYS = ("version", "fingerprint", "epoch", "cursor", "sources", "global_batch_size")
"""The envelope's keys (a mixture adds ``schedule``)."""


def make_state(
    stream: SampleStream, cursor: StreamCursor, *, batches: int, global_batch: int
) -> dict[str, Any]:
    """The envelope of a position (plain JSON-safe ints, strings, lists, dicts): what every
    entry point saves.

    Args:
        stream: The stream the position is in (its fingerprint, seq_len, source positions).
        cursor: The position.
        batches: Batches delivered in the cursor's pass (a ``StreamDataset`` copy: the
            pass-relative number of its next batch; 0 before its pass started).
        global_batch: Samples per optimizer step; inside a step the cursor's step size
            counts (a loader keeps it on a resume inside a step).
    """
    samples = cursor.sample
    sources = stream.source_positions(cursor)
    state: dict[str, Any] = {
        "version": STATE_VERSION,
        "fingerprint": stream.fingerprint(cursor),
        "epoch": cursor.pass_index,
        "cursor": {"samples": samples, "tokens": samples * stream.seq_len, "batches": batches},
        "sources": sources,
        "global_batch_size": cursor.step_size if cursor.in_step else global_batch,
    }
    if cursor.in_step:
        state["cursor"]["in_step"] = cursor.in_step
    mixture = cursor.mixture
    if mixture is not None:
        names = list(sources)
        state["cursor"]["step"] = mixture.step
        state["schedule"] = {
            "phase_step": mixture.phase_step,
            "phase_drawn": dict(zip(names, mixture.phase_drawn, strict=True)),
            "batch_sizes": [list(pair) for pair in mixture.batch_sizes],
        }
        if cursor.in_step:  # the counts the step in progress is allocated from
            state["schedule"]["step_drawn"] = dict(zip(names, mixture.drawn, strict=True))
    return state


@dataclass(frozen=True)
class LoadedState:
    """A checked state: where the stream continues, and the batches of the pass so far."""

    cursor: StreamCursor
    batches: int


def load_state(
    state: Any, stream: SampleStream, ignore_fingerprint_mismatch: bool = False, slack: int = 0
) -> LoadedState:
    """Check a saved envelope against ``stream`` (the module's loading rules); ``slack``:
    samples the position may lie past the pass end (a ``StreamDataset`` worker's cursor
    steps over it by up to ``workers - 1`` batches).

    Raises:
        StateError: malformed, too new, saved for other data or config, or an impossible
            position; the message names the field, its value and what was expected.
    """
    current = read_state(state)
    names = [s.name for s in stream.sources]
    sources = _sources(current["sources"], names)
    cursor = _cursor(current, sources, stream.is_mixture)
    fields = current["cursor"]
    batches = state_int(fields["batches"], "cursor.batches")
    if batches > cursor.sample:
        raise StateError(
            f"state cursor.batches = {batches} exceeds cursor.samples = {cursor.sample} "
            "(every batch holds at least one sample)"
        )
    same = check_fingerprint(
        current["fingerprint"], stream.fingerprint(cursor), ignore_fingerprint_mismatch
    )
    # The override skips what is derived from the data and the cursor (docs/design.md §2.8),
    # never the types and keys; with other data those derivations would not hold anyway.
    derive = same and not ignore_fingerprint_mismatch
    check_cursor(stream, cursor, _envelope_fields(), slack=slack, derive=derive)
    if derive:
        _check_derived(fields, sources, cursor, stream)
    return LoadedState(cursor, batches)


def read_state(state: Any) -> dict[str, Any]:
    """Validate the envelope's shape and upgrade it to the current version.

    Raises:
        StateError: not a streamload state, a bad or newer version, or missing or unknown
            top-level keys.
    """
    if not isinstance(state, Mapping):
        raise StateError(
            f"not a streamload loader state (a mapping with keys {', '.join(STATE_KEYS)}): "
            f"{short_repr(state)}"
        )
    if "version" not in state:
        raise StateError(f"not a streamload loader state (no 'version' key): {short_repr(state)}")
    version = state["version"]
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise StateError(f"state version {short_repr(version)} is not a positive integer")
    if version > STATE_VERSION:
        raise StateError(
            f"state version {version} is newer than this streamload understands "
            f"({STATE_VERSION}); upgrade streamload"
        )
    current = dict(state)
    while current["version"] < STATE_VERSION:
        current = UPGRADERS[current["version"]](current)
    state_mapping(current, "(top level)", STATE_KEYS, ("schedule",))
    state_int(current["global_batch_size"], "global_batch_size", 1)
    return current


def _cursor(
    current: Mapping[str, Any], sources: dict[str, dict[str, int]], mixture: bool
) -> StreamCursor:
    """The position the envelope's fields name (types and keys checked, not consistency)."""
    extra = ("step",) if mixture else ()
    fields = state_mapping(
        current["cursor"], "cursor", ("samples", "tokens", "batches", *extra), ("in_step",)
    )
    samples = state_int(fields["samples"], "cursor.samples")
    epoch = state_int(current["epoch"], "epoch")
    assumed = state_int(current["global_batch_size"], "global_batch_size", 1)
    in_step = 0 if "in_step" not in fields else state_int(fields["in_step"], "cursor.in_step", 1)
    if in_step >= assumed:
        raise StateError(
            f"state cursor.in_step = {in_step} must be below global_batch_size = {assumed} (the "
            "samples of the step in progress already delivered)"
        )
    size = assumed if in_step else 0
    if not mixture:
        if "schedule" in current:
            raise StateError(
                "state has a 'schedule' (a mixture's) but this stream is not a mixture"
            )
        return StreamCursor(epoch, samples, None, in_step, size)
    if "schedule" not in current:
        raise StateError("state (top level): missing 'schedule' (a mixture's position)")
    step = state_int(fields["step"], "cursor.step")
    mixture_cursor = _mixture_cursor(current["schedule"], sources, step, in_step, assumed)
    return StreamCursor(epoch, samples, mixture_cursor, in_step, size)


def _mixture_cursor(
    value: Any, sources: dict[str, dict[str, int]], step: int, in_step: int, assumed: int
) -> MixtureCursor:
    """A mixture's counts and schedule position, at the start of the step in progress:
    ``sources`` counts what was delivered, ``schedule.step_drawn`` (only inside a step) what
    was drawn when the step began."""
    schedule = state_mapping(
        value, "schedule", ("phase_step", "phase_drawn"), ("batch_sizes", "step_drawn")
    )
    names = list(sources)
    phase = state_mapping(schedule["phase_drawn"], "schedule.phase_drawn", names)
    sizes = read_batch_sizes(schedule.get("batch_sizes"), "schedule.batch_sizes", step, assumed)
    if ("step_drawn" in schedule) != bool(in_step):
        raise StateError(
            "state schedule.step_drawn (each source's count at the start of the step in "
            "progress) goes with cursor.in_step, and only with it: "
            + ("it is missing" if in_step else "cursor.in_step is absent")
        )
    drawn = tuple(sources[n]["samples"] for n in names)
    if in_step:
        at_step = state_mapping(schedule["step_drawn"], "schedule.step_drawn", names)
        drawn = tuple(state_int(at_step[n], f"schedule.step_drawn.{n}") for n in names)
    return MixtureCursor(
        step,
        drawn,
        state_int(schedule["phase_step"], "schedule.phase_step"),
        tuple(state_int(phase[n], f"schedule.phase_drawn.{n}") for n in names),
        sizes,
    )


def _sources(value: Any, names: list[str]) -> dict[str, dict[str, int]]:
    sources = state_mapping(value, "sources", names)
    out = {}
    for name in names:
        entry = state_mapping(sources[name], f"sources.{name}", ("epoch", "samples"))
        out[name] = {key: state_int(entry[key], f"sources.{name}.{key}") for key in entry}
    return out


def _envelope_fields() -> CursorFields:
    return CursorFields(
        pass_index="epoch",
        sample="cursor.samples",
        step="cursor.step",
        phase_step="schedule.phase_step",
        batch_sizes="schedule.batch_sizes",
        drawn=lambda i, name: f"sources.{name}.samples",
        phase_drawn=lambda i, name: f"schedule.phase_drawn.{name}",
    )


def _check_derived(
    fields: Mapping[str, Any],
    sources: dict[str, dict[str, int]],
    cursor: StreamCursor,
    stream: SampleStream,
) -> None:
    tokens = state_int(fields["tokens"], "cursor.tokens")
    if tokens != cursor.sample * stream.seq_len:
        raise StateError(
            f"state cursor.tokens = {tokens} disagrees with cursor.samples × seq_len = "
            f"{cursor.sample} × {stream.seq_len} = {cursor.sample * stream.seq_len}"
        )
    expected = stream.source_positions(cursor)
    if sources != expected:
        raise StateError(
            f"state sources = {short_repr(sources)} disagree with epoch {cursor.pass_index} "
            f"and cursor.samples {cursor.sample}, which give {short_repr(expected)}; the state "
            "was edited or is corrupt"
        )
