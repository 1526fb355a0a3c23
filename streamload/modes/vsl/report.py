"""What an epoch of a ``vsl`` stream holds, from the plan alone: pieces and batches per
length, the curriculum's segments, each step's length, and the rows of any step
(``streamload plan`` and ``streamload samples`` in vsl mode)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from streamload.errors import ConfigError
from streamload.modes.base import SamplesRequest
from streamload.modes.vsl.options import curriculum_name, vsl_batch_size
from streamload.modes.vsl.stream import VslStream
from streamload.streams.chunks import ChunkPlan
from streamload.util.files import atomic_output

__all__ = [
    "plot_curriculum",
    "report_lines",
    "save_npz",
    "step_arrays",
    "step_lengths",
    "vsl_report",
    "write_samples",
]


def step_lengths(stream: VslStream, pass_index: int = 0) -> np.ndarray:
    """int64 ``[steps]``: inputs per row of every step of pass ``pass_index``."""
    buckets, _ = stream.pass_steps(pass_index)
    return np.asarray(stream.lengths, dtype=np.int64)[buckets]


def vsl_report(stream: VslStream) -> dict[str, Any]:
    """One epoch: pieces (all sources), batches and tokens per length, each source's
    documents and pieces, the curriculum, and per segment (a growth curriculum's
    sub-cycles) the tokens of each length."""
    sampling = stream.config.sampling
    order = stream.order
    tokens = int(sampling.tokens_per_batch or 0)
    names = [str(n) for n in stream.lengths]
    bounds = order.segment_steps.tolist()
    segments = [
        {
            "steps": [bounds[s], bounds[s + 1]],
            "tokens": dict(zip(names, (order.counts[s] * tokens).tolist(), strict=True)),
        }
        for s in range(order.counts.shape[0])
    ]
    totals = order.bucket_totals() * tokens
    single = len(stream.sources) == 1
    sources = [s.report(stream.batches if single else None) for s in stream.sources]
    pieces = [sum(int(r["lengths"][k]["pieces"]) for r in sources) for k in range(len(names))]
    lengths = [
        {"length": n, "pieces": p, "batches": b, "tokens": b * tokens}
        for n, p, b in zip(stream.lengths, pieces, stream.batches, strict=True)
    ]
    report: dict[str, Any] = {
        "curriculum": curriculum_name(sampling.curriculum),
        "tokens_per_batch": tokens,
        "steps": order.steps,
        "tokens": order.steps * tokens,
        "first_step_length": stream.lengths[order.head] if order.head >= 0 else None,
        "lengths": lengths,
        "token_shares": dict(zip(names, (totals / max(totals.sum(), 1)).tolist(), strict=True)),
        "segments": segments,
        "sources": sources,
    }
    if stream.config.is_mixture:
        names = [s.name for s in stream.sources]
        phases = stream.schedule
        report["weights"] = dict(zip(names, phases[0].weights, strict=True))
        report["schedule"] = [
            {"start_step": p.start_step, "weights": dict(zip(names, p.weights, strict=True))}
            for p in phases
        ]
    return report


def report_lines(report: dict[str, Any]) -> list[str]:
    """The report in words, one line each."""
    out = [
        f"one epoch: {report['steps']:,} steps of {report['tokens_per_batch']:,} tokens "
        f"({report['curriculum']} curriculum)"
    ]
    for row in report["lengths"]:
        share = 100 * report["token_shares"][str(row["length"])]
        out.append(
            f"  length {row['length']:>6}: {row['pieces']:,} pieces -> {row['batches']:,} "
            f"batches, {row['tokens']:,} tokens ({share:.1f} %)"
        )
    for source in report["sources"]:
        line = (
            f"{source['source']}: {source['documents']:,} documents; "
            f"{source['dropped_tokens']:,} tokens of document tails in no piece"
        )
        if "weights" in report:
            line += f"; weight {report['weights'][source['source']]:.4g}"
        else:
            left = sum(r["leftover_pieces"] * r["length"] for r in source["lengths"])
            line += f"; {left:,} tokens of pieces each epoch leaves over"
        out.append(line)
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
    ``world_size``): ``step_K`` int64 ``[rows, L + 1]`` and ``sources_K`` (each row's source
    index) per step, and ``lengths``."""
    steps = stream.order.steps
    if start < 0 or count < 0 or start + count > steps:
        raise ConfigError(f"--start {start} --count {count} is outside the epoch of {steps} steps")
    if stream.slots % world_size:
        raise ConfigError(
            f"--world-size {world_size} does not divide the {stream.slots} slots of a "
            "global batch (tokens_per_batch / max_seq_len)"
        )
    out: dict[str, np.ndarray] = {}
    lengths = []
    for step in range(start, start + count):
        sources, pieces = stream.step_rows(pass_index, step, world_size, rank)
        ids = pieces.reshape(1, -1)
        plan = ChunkPlan(pass_index, ids, sources.astype(np.int16).reshape(1, -1), ids)
        tokens = stream.read_chunk(plan, documents=False).tokens
        out[f"step_{step}"] = tokens.astype(np.int64)
        out[f"sources_{step}"] = sources.astype(np.int64)
        lengths.append(tokens.shape[1] - 1)
    out["lengths"] = np.asarray(lengths, dtype=np.int64)
    return out


def write_samples(stream: VslStream, request: SamplesRequest) -> str:
    """``streamload samples`` in vsl mode: steps ``[start, start + count)``, each its own
    length, into a ``.npz`` (``rank``'s rows with ``world_size``); returns what it wrote.

    Raises:
        ConfigError: a bad rank, world size, batch size, range or output name.
    """
    if (request.rank is None) != (request.world_size is None):
        raise ConfigError("--rank and --world-size go together")
    world = 1 if request.world_size is None else request.world_size
    rank = 0 if request.rank is None else request.rank
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"--rank {rank} must be in [0, --world-size {world}), world size >= 1")
    if request.batch_size is not None:
        vsl_batch_size(stream.config, request.batch_size, world)
    if not request.out.endswith(".npz"):
        raise ConfigError(
            f"--out {request.out!r}: vsl steps have different lengths; name a .npz file "
            "(one array step_K per step, and lengths)"
        )
    arrays = step_arrays(stream, request.pass_index, request.start, request.count, world, rank)
    save_npz(request.out, arrays)
    lengths = ", ".join(map(str, arrays["lengths"].tolist()))
    return f"wrote {request.count} steps (lengths {lengths}) to {request.out}"


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
    top.set_title(f"{curriculum_name(stream.config.sampling.curriculum)} curriculum, one epoch")
    window = max(1, lengths.size // 20)
    kernel = np.ones(window) / window
    for length in stream.lengths:
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
