"""Sequence-length warm-up: loader throughput with windows cut into shorter rows.

A schedule runs a step of length ``L`` as the plain stream's windows of ``seq_len`` cut into
``seq_len / L`` rows (``streamload.streams.seq_len.cut_chunk``: one strided copy of the
tokens, document starts and masks, before the masks are made). What that costs is measured
against the plain loader over the same shuffled windows, same run: each case is the whole
run at one length (a ``[[seq_len_schedule]]`` of one phase at step 0; ``L = seq_len`` is the
plain loader, no schedule); cases run round-robin within each repeat; medians; the ratio is
to the plain loader with the same masks. Input tokens per batch are the same in every case.

    python benchmarks/seq_len_warmup.py --repeats 5
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from _common import Column, add_common_args, bench_config, emit, ensure_corpus, int_list, median
from throughput import timed_batches

import streamload


def make_config(args: argparse.Namespace, paths: list[str], length: int, masks: bool) -> Any:
    """The bench config at ``length`` inputs per row (``seq_len``: no schedule)."""
    samples = int((args.tokens + args.warmup_tokens) / args.seq_len) + 4 * args.batch_size
    config = bench_config(paths, seq_len=args.seq_len, masks=masks, num_samples=samples)
    if length != args.seq_len:
        config["global_batch_size"] = args.batch_size
        config["seq_len_schedule"] = [{"start_step": 0, "seq_len": length}]
    return config


def measure(config: Any, args: argparse.Namespace) -> float:
    """Input tokens/s after the warm-up, 0 workers."""
    batch_tokens = args.batch_size * args.seq_len
    warmup = int(args.warmup_tokens // batch_tokens)
    measured = int(args.tokens // batch_tokens)
    loader = streamload.build_loader(config, batch_size=args.batch_size)
    try:
        elapsed = timed_batches(iter(loader), warmup, measured)
    finally:
        loader.close()
    return measured * batch_tokens / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--corpus-tokens", type=float, default=2e7, help="corpus size")
    parser.add_argument("--tokens", type=float, default=8e6, help="measured input tokens")
    parser.add_argument("--warmup-tokens", type=float, default=2e6, help="skipped tokens")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lengths", type=int_list, default=[2048, 1024, 512, 128])
    args = parser.parse_args()
    paths = ensure_corpus(args.data_dir, int(args.corpus_tokens), args.shard_tokens)
    cases = [(length, masks) for masks in (False, True) for length in args.lengths]
    rates: dict[tuple[int, bool], list[float]] = {case: [] for case in cases}
    for rep in range(max(1, args.repeats)):
        for length, masks in cases:
            rate = measure(make_config(args, paths, length, masks), args)
            rates[length, masks].append(rate)
            print(f"[{rep + 1}] L={length} masks={masks}: {rate / 1e6:.1f}", file=sys.stderr)
    rows = []
    for length, masks in cases:
        values = rates[length, masks]
        plain = median(rates[args.seq_len, masks]) if args.seq_len in args.lengths else None
        rows.append(
            {
                "length": length,
                "rows": args.seq_len // length,
                "masks": "on" if masks else "off",
                "mtok_s": median(values) / 1e6,
                "range": f"{min(values) / 1e6:.0f}-{max(values) / 1e6:.0f}",
                "vs_plain": None if plain is None else median(values) / plain,
            }
        )
    notes = [
        f"Corpus: {len(paths)} NPY shard(s) of {args.shard_tokens:.3g} uint32 tokens, seq_len "
        f"{args.seq_len}, batch {args.batch_size} windows, shuffle on, 0 workers; page cache "
        f"warm. Per case {args.warmup_tokens:.3g} warm-up tokens skipped, {args.tokens:.3g} "
        f"input tokens timed, every tensor touched per page; median of {args.repeats} "
        "round-robin repeats; ratio = median / the plain loader's (same masks) median.",
    ]
    emit(args, "Sequence-length warm-up: cut rows", rows, COLUMNS, notes)


COLUMNS: list[Column] = [
    ("length", "row length L", ""),
    ("rows", "rows per window", ""),
    ("masks", "masks", ""),
    ("mtok_s", "Mtok/s (median)", ".1f"),
    ("range", "min-max", ""),
    ("vs_plain", "ratio to plain", ".2f"),
]


if __name__ == "__main__":
    main()
