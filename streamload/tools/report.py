"""The realized mixture of a run's first steps, computed from the plan alone (no token reads),
and where each source's train/valid/test splits lie.

Used by ``streamload plan``: per schedule phase, the target weights and the realized shares;
per source, samples drawn, epochs completed and the step where each epoch began; with
``sampling.split``, each source's document and token ranges of every split.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from streamload.config import SamplingMode
from streamload.errors import ConfigError
from streamload.plan.mixture import MixtureCursor, counts_for
from streamload.plan.split import SPLIT_NAMES, split_bookends
from streamload.streams.interface import SampleStream

__all__ = ["MAX_EPOCH_STEPS", "batch_source_counts", "mixture_report", "split_report"]

MAX_EPOCH_STEPS = 20
"""Epoch start steps listed per source."""


def batch_source_counts(stream: SampleStream, steps: int) -> np.ndarray:
    """Samples per source in each of the first ``steps`` global batches, int64 ``[steps, S]``."""
    batch = stream.config.global_batch_size
    if not stream.is_mixture or batch is None:
        raise ConfigError("streamload plan needs a mixture config with global_batch_size")
    cursor = MixtureCursor.start(len(stream.sources))
    drawn = np.zeros(len(stream.sources), dtype=np.int64)
    phase_drawn, phase_step = drawn.copy(), cursor.phase_step
    out = np.empty((steps, len(stream.sources)), dtype=np.int64)
    for step in range(steps):
        counts, phase_step, phase_drawn = counts_for(
            stream.phases, batch, step, phase_step, drawn, phase_drawn
        )
        out[step] = counts
        drawn += counts
    return out


def mixture_report(stream: SampleStream, steps: int) -> dict[str, Any]:
    """Phases (target vs realized shares, worst per-batch deviation) and per-source epochs."""
    counts = batch_source_counts(stream, steps)
    batch = int(counts[0].sum()) if steps else 0
    names = [s.name for s in stream.sources]
    phases = []
    bounds = [p.start_step for p in stream.phases] + [steps]
    for phase, (lo, hi) in zip(stream.phases, itertools.pairwise(bounds), strict=True):
        hi = min(hi, steps)
        if lo >= hi:
            continue
        part = counts[lo:hi]
        target = np.asarray(phase.weights)
        phases.append({
            "start_step": lo, "end_step": hi,
            "weights": dict(zip(names, target.round(6).tolist(), strict=True)),
            "realized": dict(zip(names, (part.sum(0) / part.sum()).round(6).tolist(), strict=True)),
            "max_batch_deviation": float(np.abs(part - target * batch).max()),
        })  # fmt: skip
    cumulative = np.cumsum(counts, axis=0)
    sources = {}
    for index, source in enumerate(stream.sources):
        drawn = cumulative[:, index]
        epoch_steps = np.searchsorted(
            drawn, np.arange(1, 1 + MAX_EPOCH_STEPS) * source.num_windows, side="right"
        )
        sources[source.name] = {
            "windows": source.num_windows,
            "samples": int(drawn[-1]) if steps else 0,
            "epochs_completed": int(drawn[-1] // source.num_windows) if steps else 0,
            "epoch_starts": [0] + [int(s) + 1 for s in epoch_steps if s < steps],
        }
    return {"steps": steps, "global_batch_size": batch, "phases": phases, "sources": sources}


def split_report(stream: SampleStream) -> dict[str, Any]:
    """Per source, the bounds of every split of ``sampling.split`` (empty: no split is set):
    ``{"split", "reads", "rule", "total_documents", "total_tokens", "parts": {name:
    {"documents": [begin, end) or None, "tokens": [begin, end)}}}``. Megatron mode counts
    sequences (GPTDataset's documents), as megatron-core splits them."""
    sampling = stream.config.sampling
    if sampling.split is None:
        return {}
    if sampling.mode is not SamplingMode.MEGATRON:
        found = {s.name: getattr(s, "split", None) for s in stream.sources}
        return {name: split.report() for name, split in found.items() if split is not None}
    out = {}
    for source in stream.sources:
        starts = np.append(source.sequence_starts, source.shards.num_tokens)  # type: ignore[attr-defined]
        docs = split_bookends(sampling.split, int(starts.size) - 1)
        parts = {
            name: {"documents": [docs[i], docs[i + 1]],
                   "tokens": [int(starts[docs[i]]), int(starts[docs[i + 1]])]}
            for i, name in enumerate(SPLIT_NAMES)
        }  # fmt: skip
        out[source.name] = {
            "split": sampling.split, "reads": sampling.split_name.value, "rule": "sequences",
            "total_documents": int(starts.size) - 1, "total_tokens": int(starts[-1]),
            "parts": parts,
        }  # fmt: skip
    return out
