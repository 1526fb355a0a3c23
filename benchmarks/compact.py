"""Compact batches (``packing.compact``) beside the full layout and a bare torchdata loop.

Issue 20's goal: a compact loader at ≥ 1.2x the tokens/s of the bare torchdata map-style loop
over the same windows, same run. Every case walks the same shuffled windows (the loader's own
sample order, as ``throughput.py`` does), skips a warm-up, then times a fixed number of input
tokens; cases run round-robin within each repeat; medians.

Cases:
* ``raw``: throughput.py's baseline (one slice per window into int64 inputs and labels);
* ``torchdata``: the bare map-style loop a user writes with ``torchdata.nodes``:
  ``SamplerWrapper`` → ``Mapper(dataset.__getitem__)`` (one ``uint32`` window per sample, a
  memmap view) → ``Batcher`` → ``Mapper(torch.stack)`` → ``Loader``, in-process (the issue's
  "334 M tokens/s" loop), and with ``--num-workers`` through ``ParallelMapper`` threads;
* ``streamload`` full (int64 ``input_ids`` and ``labels``) and compact (``tokens`` ``[b, L+1]``
  int32, viewed from the ``uint32`` windows), masks off/on, 0 workers and ``--num-workers``
  thread workers.

    python benchmarks/compact.py --repeats 5
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from _common import Column, add_common_args, bench_config, emit, ensure_corpus, int_list, median
from _torchdata_loop import torchdata_batches
from throughput import Windows, raw_batches, touch

import streamload

Batch = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Case:
    """One measured configuration."""

    kind: str  # "raw", "torchdata" or "streamload"
    compact: bool = False
    masks: bool = False
    num_workers: int = 0

    @property
    def label(self) -> str:
        layout = " compact" if self.compact else ""
        return f"{self.kind}{layout} masks={self.masks} workers={self.num_workers}"


def make_batches(
    case: Case, args: argparse.Namespace, paths: list[str], windows: Windows, samples: int
) -> tuple[Iterator[Batch], Callable[[], None]]:
    """The batch iterator of a case and how to stop it. Every case maps the shards anew, as a
    new training process does (the loader opens its own maps; a reused map would carry the
    page-table entries an earlier case faulted in)."""
    windows = copy.copy(windows)  # without its maps (Windows.__getstate__)
    if case.kind == "raw":
        return raw_batches(windows, args.batch_size), lambda: None
    if case.kind == "torchdata":
        return torchdata_batches(windows, args.batch_size, case.num_workers), lambda: None
    config = bench_config(paths, seq_len=args.seq_len, masks=case.masks, num_samples=samples)
    config["packing"]["compact"] = case.compact
    loader = streamload.build_loader(
        config, batch_size=args.batch_size, num_workers=case.num_workers
    )
    return iter(loader), loader.close


def measure(
    case: Case, args: argparse.Namespace, paths: list[str], windows: Windows, samples: int
) -> float:
    """Input tokens/s of one case after the warm-up."""
    batch_tokens = args.batch_size * args.seq_len
    warmup = int(args.warmup_tokens // batch_tokens)
    measured = int(args.tokens // batch_tokens)
    batches, close = make_batches(case, args, paths, windows, samples)
    try:
        for _ in range(warmup):
            next(batches)
        start = time.perf_counter()
        for _ in range(measured):
            touch(next(batches))
        elapsed = time.perf_counter() - start
    finally:
        close()
    return measured * batch_tokens / elapsed


def make_cases(args: argparse.Namespace) -> list[Case]:
    workers = [0, *[w for w in args.num_workers if w]]
    cases = [Case("raw"), *[Case("torchdata", num_workers=w) for w in workers]]
    for masks in (False, True):
        for w in workers:
            cases += [Case("streamload", compact, masks, w) for compact in (False, True)]
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--corpus-tokens", type=float, default=1e8, help="corpus size")
    parser.add_argument("--tokens", type=float, default=32e6, help="measured input tokens")
    parser.add_argument("--warmup-tokens", type=float, default=8e6, help="skipped tokens")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--num-workers", type=int_list, default=[0, 2], help="thread workers")
    args = parser.parse_args()
    paths = ensure_corpus(args.data_dir, int(args.corpus_tokens), args.shard_tokens)
    batch = args.batch_size
    samples = int((args.tokens + args.warmup_tokens) / args.seq_len + 4 * 64 * batch)
    samples = -(-samples // batch) * batch
    config = bench_config(paths, seq_len=args.seq_len, num_samples=samples)
    stream = streamload.SampleStream.from_config(streamload.load_config(config))
    windows = Windows(paths, stream.window_starts(0, np.arange(samples)), args.seq_len)
    cases = make_cases(args)
    rates: dict[Case, list[float]] = {case: [] for case in cases}
    for rep in range(max(1, args.repeats)):
        for case in cases:
            rates[case].append(measure(case, args, paths, windows, samples))
            print(f"[{rep + 1}] {case.label}: {rates[case][-1] / 1e6:.1f}", file=sys.stderr)
    emit(args, "Compact batches", table_rows(cases, rates), COLUMNS, notes(args, paths))


COLUMNS: list[Column] = [
    ("case", "case", ""),
    ("layout", "layout", ""),
    ("masks", "masks", ""),
    ("workers", "workers", ""),
    ("mtok_s", "Mtok/s (median)", ".1f"),
    ("range", "min-max", ""),
    ("vs_raw", "ratio to raw", ".2f"),
    ("vs_torchdata", "ratio to torchdata, same workers", ".2f"),
]


def table_rows(cases: list[Case], rates: dict[Case, list[float]]) -> list[dict[str, Any]]:
    raw = median(rates[Case("raw")])
    bare = {c.num_workers: median(rates[c]) for c in cases if c.kind == "torchdata"}
    rows = []
    for case in cases:
        values = rates[case]
        loader = case.kind == "streamload"
        layout = ("compact" if case.compact else "full") if loader else "-"
        rows.append(
            {
                "case": case.kind,
                "layout": layout if case.kind != "torchdata" else "uint32 window",
                "masks": ("on" if case.masks else "off") if loader else "-",
                "workers": f"{case.num_workers} thread" if case.num_workers else "0",
                "mtok_s": median(values) / 1e6,
                "range": f"{min(values) / 1e6:.0f}-{max(values) / 1e6:.0f}",
                "vs_raw": median(values) / raw,
                "vs_torchdata": median(values) / bare[case.num_workers] if loader else None,
                "runs_tok_s": [round(v) for v in values],
            }
        )
    return rows


def notes(args: argparse.Namespace, paths: list[str]) -> list[str]:
    return [
        f"Corpus: {len(paths)} NPY shard(s) of {args.shard_tokens:.3g} uint32 tokens, seq_len "
        f"{args.seq_len}, batch {args.batch_size}, shuffle on; page cache warm.",
        f"Per case: {args.warmup_tokens:.3g} warm-up tokens skipped, {args.tokens:.3g} input "
        "tokens timed, every delivered tensor of a page or more touched once per 4 KiB page; "
        f"median of {args.repeats} round-robin repeats; every case maps the shards anew.",
        "ratio to torchdata = median / median of the bare torchdata loop with the same number "
        "of workers (threads), same run; issue 20's goal for compact: >= 1.2.",
    ]


if __name__ == "__main__":
    main()
