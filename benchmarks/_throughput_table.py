"""The table of ``throughput.py``: medians, ratios to the baselines of the same run, and
each case's byte limit.

Byte limit: the raw baseline writes ``input_ids`` and ``labels`` (16 bytes per token) straight
from the memmap, the least work per byte a Python loader can do; its time per byte written,
times the bytes a case's batches hold per token, is the fastest that case's layout can be
built the same way (``raw Mtok/s x 16 / bytes per token``). A case at ratio ~1 to its byte
limit sits at what its bytes cost; only fewer bytes (compact batches, int32 or
``cu_seqlens``-only masks) go faster.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from _common import VOCAB_SIZE, Column, median

__all__ = ["columns", "notes", "table_rows"]

PAD_TOKEN_ID = VOCAB_SIZE


def columns(args: argparse.Namespace) -> list[Column]:
    """The table's columns; the mode columns only when a mode other than concat runs."""
    modes = args.modes != ["concat"]
    loss = True in args.loss_masks
    return [
        ("case", "case", ""),
        *([("mode", "mode", "")] if modes else []),
        ("layout", "layout", ""),
        *([("loss_masks", "mask files", "")] if loss else []),
        ("batch_size", "batch", "d"),
        ("masks", "masks", ""),
        ("workers", "workers", ""),
        ("mtok_s", "Mpositions/s (median)" if modes else "Mtok/s (median)", ".1f"),
        ("range", "min-max", ""),
        *([("data_mtok_s", "data Mtok/s", ".1f")] if modes else []),
        ("ratio", "ratio to raw", ".2f"),
        ("vs_torchdata", "ratio to torchdata", ".2f"),
        ("vs_plain", "masks / plain", ".2f"),
        ("bytes", "B/token", ".1f"),
        ("limit", "byte limit Mtok/s", ".1f"),
        ("vs_limit", "ratio to byte limit", ".2f"),
        ("faults", "page faults / batch", ".1f"),
        *([("vs_concat", "packed / concat", ".2f")] if modes else []),
        *([("vs_unmasked", "with / without mask files", ".2f")] if loss else []),
    ]


def table_rows(
    cases: Sequence[Any],
    rates: dict[Any, list[float]],
    shares: dict[str, float],
    weights: dict[Any, float],
    faults: dict[Any, list[float]],
) -> list[dict[str, Any]]:
    """One row per case: median tokens/s, the ratios to the raw baseline and the torchdata
    loop of its batch size (same workers), a masks case's ratio to its plain twin, its bytes
    per token and byte limit, and for a non-concat loader case its data tokens/s and its
    ratio to its concat twin."""
    raw = {c.batch_size: median(rates[c]) for c in cases if c.kind == "raw"}
    raw_bytes = {c.batch_size: weights[c] for c in cases if c.kind == "raw"}
    loops = {
        (c.batch_size, c.num_workers): median(rates[c]) for c in cases if c.kind == "torchdata"
    }
    rows = []
    for case in cases:
        values = rates[case]
        loader = case.kind == "streamload"
        twin = rates.get(case.concat_twin) if loader and case.mode != "concat" else None
        bare = rates.get(case.unmasked_twin) if case.loss_masks else None
        plain = rates.get(case.plain_twin) if loader and case.masks else None
        loop = loops.get((case.batch_size, case.num_workers)) if loader else None
        b = case.batch_size
        limit = raw[b] * raw_bytes[b] / weights[case] if b in raw else None
        rows.append(
            {
                "case": case.kind,
                "mode": case.mode if loader else None,
                "batch_size": case.batch_size,
                "masks": (
                    ("on" if case.mask_layout == "int64" else f"on, {case.mask_layout}")
                    if case.masks
                    else "off"
                ),
                "workers": f"{case.num_workers} {case.worker_type}" if case.num_workers else "0",
                "mtok_s": median(values) / 1e6,
                "range": f"{min(values) / 1e6:.0f}-{max(values) / 1e6:.0f}",
                "data_mtok_s": median(values) * shares[case.mode] / 1e6 if loader else None,
                "ratio": median(values) / raw[case.batch_size] if case.batch_size in raw else None,
                "vs_concat": median(values) / median(twin) if twin else None,
                "loss_masks": ("on" if case.loss_masks else "off") if loader else None,
                "vs_unmasked": median(values) / median(bare) if bare else None,
                "layout": ("compact" if case.compact else "full") if loader else None,
                "vs_torchdata": median(values) / loop if loop else None,
                "vs_plain": median(values) / median(plain) if plain else None,
                "bytes": weights[case],
                "limit": limit / 1e6 if limit else None,
                "vs_limit": median(values) / limit if limit else None,
                "faults": median(faults[case]),
                "runs_tok_s": [round(v) for v in values],
            }
        )
    return rows


def notes(args: argparse.Namespace, paths: Sequence[str], shares: dict[str, float]) -> list[str]:
    out = [
        f"Corpus: {len(paths)} NPY shard(s), {len(paths) * args.shard_tokens:.3g} uint32 tokens, "
        f"seq_len {args.seq_len}, shuffle on; page cache warm.",
        f"Per case: {args.warmup_tokens:.3g} warm-up tokens skipped, {args.tokens:.3g} input "
        f"tokens timed; median of {args.repeats} round-robin repeats"
        + (
            "; each delivered tensor of a page or more is touched once per 4 KiB page"
            if args.touch
            else ""
        )
        + "; every case maps the shards anew.",
        "Ratio = median tokens/s / median of the raw baseline at the same batch size (the raw "
        "baseline builds no masks, so masks=on rows include the cost of the masks); ratio to "
        "torchdata: to the bare torchdata map-style loop (uint32 windows, 4 B/token) with "
        "the same batch size and number of (thread) workers; masks / plain: to the same "
        "case without masks; all in the same run.",
        "B/token = bytes of every tensor of a batch per input token (what the layout must "
        "write); byte limit = raw Mtok/s x raw B/token / B/token (the raw slicing's time per "
        "byte times the bytes the case writes); ratio to byte limit = median / byte limit; "
        "page faults / batch: the process's minor faults per timed batch (median; fresh "
        "memory pays one per 4 KiB page written, the memmap one per page first read).",
    ]
    if True in args.loss_masks:
        out.append(
            f"mask files: a loss-mask file per shard ({args.loss_mask_pattern} zeros), named by "
            "label_masks; with / without = median / median of the same case without them, same "
            "run. Every batch carries source_ids in both."
        )
    for mode in args.modes:
        if mode != "concat":
            out.append(
                f"{mode}: sampling.mode = {mode!r}, pad_token_id {PAD_TOKEN_ID}; rates count "
                f"input positions (padding included); data Mtok/s = positions/s x the epoch's "
                f"data share {shares[mode]:.5f} (padding {100 * (1 - shares[mode]):.3f} %); "
                f"{mode} / concat = median / median of the concat case with the same batch "
                "size, masks and workers, same run."
            )
    return out
