"""Concat-mode loader throughput of the same tokens as a NumPy folder, an Arrow IPC
(``save_to_disk``-like) folder and a Parquet folder (issue 18's bars: Parquet >= 0.5x, Arrow
>= 0.8x the NumPy folder).

The synthetic NPY corpus (uint32, EOS-delimited log-normal documents) is written once per
shard as:

* ``arrow``: an Arrow IPC *stream* per shard, ``data-0000i-of-0000N.arrow``, one row per
  document in an ``input_ids`` ``list<uint32>`` column, record batches of 1,000 rows as
  ``datasets.save_to_disk`` writes them (a window across two batches is copied);
* ``parquet``: ``streamload convert``'s writer, one file per shard, row groups of ~1 Mi
  tokens (decoded once per process into the row-group cache, then read like Arrow).

Each case builds ``streamload.build_loader`` over one folder (shuffled concat windows, the same
config otherwise), skips a warm-up, then times a fixed number of tokens. Cases run
round-robin within each repeat; the table shows medians and each case's ratio to the NumPy
folder of the same repeat set. The row-group cache is per process: the first repeat's Parquet
case decodes every row group it touches (its min shows that), later repeats find them cached.

Example:
    python benchmarks/arrow_throughput.py --repeats 5
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _common import add_common_args, bench_config, emit, ensure_corpus, int_list, median

import streamload
from streamload.formats.arrow.parquet import ParquetWriter

SAVE_TO_DISK_ROWS = 1000
"""Rows per record batch ``datasets`` writes (its ``DEFAULT_MAX_BATCH_SIZE``)."""
FOLDERS = ("numpy", "arrow", "parquet")


def documents(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, offsets): documents ending at each EOS 0 (the tail is a document)."""
    ends = np.flatnonzero(tokens == 0) + 1
    offsets = np.unique(np.concatenate([[0], ends, [tokens.size]])).astype(np.int64)
    return tokens, offsets


def write_arrow(npy: Path, out: Path, index: int, count: int) -> None:
    """One NPY shard as a ``save_to_disk``-like IPC stream (batches of 1,000 rows)."""
    import pyarrow as pa

    tokens, offsets = documents(np.load(npy, mmap_mode="r"))
    kind = pa.list_(pa.uint32())
    schema = pa.schema([pa.field("input_ids", kind)])
    with pa.ipc.new_stream(str(out / f"data-{index:05d}-of-{count:05d}.arrow"), schema) as w:
        for row in range(0, offsets.size - 1, SAVE_TO_DISK_ROWS):
            rows = offsets[row : row + SAVE_TO_DISK_ROWS + 1]
            values = pa.array(np.asarray(tokens[rows[0] : rows[-1]]), pa.uint32())
            lists = pa.ListArray.from_arrays(pa.array(rows - rows[0], pa.int32()), values)
            w.write_batch(pa.record_batch([lists], schema=schema))


def write_parquet(npy: Path, out: Path, index: int) -> None:
    """One NPY shard through streamload's Parquet writer."""
    tokens, offsets = documents(np.load(npy, mmap_mode="r"))
    with ParquetWriter(out / f"train-{index:05d}.parquet", np.uint32) as writer:
        for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
            writer.add_document(tokens[a:b])


def ensure_folders(paths: Sequence[str], work: Path) -> dict[str, list[str]]:
    """The NPY shards, and their Arrow and Parquet copies (written when missing)."""
    folders: dict[str, list[str]] = {"numpy": list(paths)}
    for fmt in ("arrow", "parquet"):
        out = work / f"{fmt}-{len(paths)}x{Path(paths[0]).parent.name}"
        if not (out / "done").exists():
            out.mkdir(parents=True, exist_ok=True)
            start = time.perf_counter()
            for i, p in enumerate(paths):
                if fmt == "arrow":
                    write_arrow(Path(p), out, i, len(paths))
                else:
                    write_parquet(Path(p), out, i)
            (out / "done").touch()
            print(f"wrote {fmt} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        folders[fmt] = [str(out)]
    return folders


def measure(config: dict[str, Any], args: argparse.Namespace, batch_size: int) -> float:
    """Tokens/s of one loader after the warm-up."""
    batch_tokens = batch_size * args.seq_len
    warmup = math.ceil(args.warmup_tokens / batch_tokens)
    measured = math.ceil(args.tokens / batch_tokens)
    loader = streamload.build_loader(config, batch_size=batch_size, num_workers=args.workers)
    batches = iter(loader)
    try:
        for _ in range(warmup):
            next(batches)
        start = time.perf_counter()
        for _ in range(measured):
            next(batches)
        elapsed = time.perf_counter() - start
    finally:
        loader._close()  # no public close(): stop the workers so the next case runs alone
    return measured * batch_tokens / elapsed


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.set_defaults(shard_tokens=16_000_000)
    parser.add_argument("--corpus-tokens", type=float, default=96e6, help="corpus size")
    parser.add_argument("--tokens", type=float, default=48e6, help="tokens timed per case")
    parser.add_argument("--warmup-tokens", type=float, default=4e6, help="tokens skipped first")
    parser.add_argument("--batch-sizes", type=int_list, default=[8], help="per-rank batch sizes")
    parser.add_argument("--workers", type=int, default=0, help="loader workers")
    parser.add_argument(
        "--masks", action=argparse.BooleanOptionalAction, default=False, help="packing masks"
    )
    parser.add_argument("--work-dir", default="/tmp/streamload-bench-arrow", help="copies")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    paths = ensure_corpus(args.data_dir, int(args.corpus_tokens), args.shard_tokens)
    folders = ensure_folders(paths, Path(args.work_dir))
    cases = [(fmt, b) for b in args.batch_sizes for fmt in FOLDERS]
    rates: dict[tuple[str, int], list[float]] = {c: [] for c in cases}
    for rep in range(max(1, args.repeats)):
        for fmt, b in cases:
            config = bench_config(folders[fmt], seq_len=args.seq_len, masks=args.masks)
            rates[(fmt, b)].append(measure(config, args, b))
            print(
                f"[{rep + 1}] {fmt} b={b}: {rates[(fmt, b)][-1] / 1e6:.1f} Mtok/s", file=sys.stderr
            )
    rows = []
    for fmt, b in cases:
        base = median(rates[("numpy", b)])
        rows.append(
            {
                "format": fmt, "batch_size": b, "mtok_s": median(rates[(fmt, b)]) / 1e6,
                "min_mtok_s": min(rates[(fmt, b)]) / 1e6,
                "ratio": median(rates[(fmt, b)]) / base,
                "bar": {"numpy": "", "arrow": ">= 0.8", "parquet": ">= 0.5"}[fmt],
            }
        )  # fmt: skip
    columns = [
        ("format", "folder", ""), ("batch_size", "batch", ""),
        ("mtok_s", "M tokens/s (median)", ".1f"), ("min_mtok_s", "min", ".1f"),
        ("ratio", "ratio to numpy", ".2f"), ("bar", "issue 18 bar", ""),
    ]  # fmt: skip
    notes = [
        f"Corpus: {len(paths)} uint32 NPY shards of {args.shard_tokens:,} tokens (EOS-delimited "
        "documents), the same tokens as Arrow IPC streams (record batches of 1,000 rows, as "
        "datasets.save_to_disk writes) and as Parquet (streamload convert's writer, row groups "
        "of ~1 Mi tokens); concat mode, shuffled, seq_len "
        f"{args.seq_len}, packing masks {'on' if args.masks else 'off'}, {args.workers} workers.",
        f"{args.tokens:.3g} tokens timed per case after {args.warmup_tokens:.3g} of warm-up; "
        f"{args.repeats} interleaved repeats; {os.cpu_count()} cores. Parquet row groups are "
        "decoded once per process (the first repeat pays the decodes: see min).",
    ]
    if args.masks:
        notes.append(
            "With packing masks the NumPy folder's document starts come from its EOS tokens, "
            "Arrow's and Parquet's from the list offsets (document_bounds)."
        )
    emit(args, "Arrow / Parquet throughput (concat mode)", rows, columns, notes)


if __name__ == "__main__":
    main()
