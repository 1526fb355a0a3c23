"""What an epoch of a ``vsl`` stream holds, from the plan alone: pieces and batches per
length, the curriculum's segments, each step's length, and the rows of any step
(``streamload plan`` and ``streamload samples`` in vsl mode)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from streamload.errors import ConfigError
from streamload.streams.vsl import VslStream
from streamload.util.files import atomic_output

__all__ = [
    "plot_curriculum",
    "report_lines",
    "save_npz",
    "step_arrays",
    "step_lengths",
    "vsl_report",
]


def step_lengths(stream: VslStream, pass_index: int = 0) -> np.ndarray:
    """int64 ``[steps]``: inputs per row of every step of pass ``pass_index``."""
    source = stream.source
    order = source.epoch_order
    sampling = stream.config.sampling
    keys = (stream.config.seed, pass_index, source.name) if sampling.shuffle else None
    buckets, _ = order.locate(np.arange(order.steps, dtype=np.int64), keys)
    return np.asarray(source.pieces.lengths, dtype=np.int64)[buckets]


def vsl_report(stream: VslStream) -> dict[str, Any]:
    """One epoch: the source's pieces and batches per length (:meth:`VslSource.report`),
    the curriculum, and per segment (a growth curriculum's sub-cycles) the tokens of each
    length."""
    source = stream.source
    sampling = stream.config.sampling
    order = source.epoch_order
    tokens = int(sampling.tokens_per_batch or 0)
    lengths = [str(n) for n in source.pieces.lengths]
    bounds = order.segment_steps.tolist()
    segments = [
        {
            "steps": [bounds[s], bounds[s + 1]],
            "tokens": dict(zip(lengths, (order.counts[s] * tokens).tolist(), strict=True)),
        }
        for s in range(order.counts.shape[0])
    ]
    totals = order.bucket_totals() * tokens
    return {
        "source": source.name,
        "curriculum": sampling.curriculum.value,
        "tokens_per_batch": tokens,
        **source.report(),
        "first_step_length": source.pieces.lengths[order.head] if order.head >= 0 else None,
        "token_shares": dict(zip(lengths, (totals / max(totals.sum(), 1)).tolist(), strict=True)),
        "segments": segments,
    }


def report_lines(report: dict[str, Any]) -> list[str]:
    """The report in words, one line each."""
    out = [
        f"{report['source']} per epoch: {report['documents']:,} documents -> "
        f"{report['steps']:,} steps of {report['tokens_per_batch']:,} tokens "
        f"({report['curriculum']} curriculum); {report['dropped_tokens']:,} tokens of "
        f"document tails and {report['leftover_tokens']:,} of leftover pieces unused"
    ]
    for row in report["lengths"]:
        out.append(
            f"  length {row['length']:>6}: {row['pieces']:,} pieces -> {row['batches']:,} "
            f"batches, {row['tokens']:,} tokens "
            f"({100 * report['token_shares'][str(row['length'])]:.1f} %), "
            f"{row['leftover_pieces']:,} pieces left over"
        )
    if len(report["segments"]) > 1:
        for seg in report["segments"]:
            first, end = seg["steps"]
            held = ", ".join(f"{n}: {t:,}" for n, t in seg["tokens"].items() if t)
            out.append(f"  steps [{first:,}, {end:,}): tokens by length {held}")
    return out


def step_arrays(
    stream: VslStream, pass_index: int, start: int, count: int, world_size: int, rank: int
) -> dict[str, np.ndarray]:
    """Tokens of steps ``[start, start + count)`` of a pass (``rank``'s rows of each with
    ``world_size``): ``step_K`` int64 ``[rows, L + 1]`` per step, and ``lengths``."""
    steps = stream.source.epoch_order.steps
    if start < 0 or count < 0 or start + count > steps:
        raise ConfigError(f"--start {start} --count {count} is outside the epoch of {steps} steps")
    if stream.source.slots % world_size:
        raise ConfigError(
            f"--world-size {world_size} does not divide the {stream.source.slots} slots of a "
            "global batch (tokens_per_batch / max_seq_len)"
        )
    out: dict[str, np.ndarray] = {}
    lengths = []
    for step in range(start, start + count):
        rows = stream.step_rows(pass_index, step, world_size, rank)
        tokens, _ = stream.source.read_pieces(rows)
        out[f"step_{step}"] = tokens.astype(np.int64)
        lengths.append(tokens.shape[1] - 1)
    out["lengths"] = np.asarray(lengths, dtype=np.int64)
    return out


def save_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` (``.npz``) atomically."""
    with atomic_output(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **arrays)  # type: ignore[arg-type]


def plot_curriculum(stream: VslStream, path: str) -> bool:
    """Plot each step's length over the first epoch and the running token share of each
    length to ``path`` (PNG/SVG/PDF by its suffix); ``False`` without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    lengths = step_lengths(stream)
    steps = np.arange(lengths.size)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    top.plot(steps, lengths, ".", markersize=2)
    top.set_yscale("log", base=2)
    top.set_ylabel("sequence length")
    top.set_title(f"{stream.config.sampling.curriculum.value} curriculum, one epoch")
    window = max(1, lengths.size // 20)
    kernel = np.ones(window) / window
    for length in stream.source.pieces.lengths:
        share = np.convolve(lengths == length, kernel, mode="same")
        bottom.plot(steps, share, label=str(length))
    bottom.set_ylabel(f"share of steps ({window}-step window)")
    bottom.set_xlabel("step")
    bottom.legend(title="length", fontsize="small", ncol=2)
    fig.tight_layout()
    fmt = os.path.splitext(path)[1].lstrip(".") or "png"
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format=fmt)
    plt.close(fig)
    return True
