"""Steady-state tokens/s of ``streamload.build_loader`` beside a raw ``numpy.memmap`` baseline.

Every case walks the same shuffled windows (the raw baseline and the peer get their stream
offsets from ``SampleStream.window_starts`` for the loader's sample ids), skips a warm-up,
then times a fixed number of input tokens. Cases run round-robin within each repeat, so
background load on a shared machine spreads over all of them; the table shows medians.

Cases:
* ``raw``: per batch, one slice per window straight from the memmap into preallocated int64
  ``input_ids``/``labels``, wrapped with ``torch.from_numpy`` (the floor of Python overhead).
* ``streamload``: the full loader, masks off/on, 0 workers or 2 thread/process workers, in
  ``sampling.mode`` ``concat`` (default) and, with ``--modes concat,packed``, ``packed``:
  whole documents best-fit packed, then ``pad_token_id`` (docs/sampling.md). Both count input
  positions (``batch_size * seq_len`` per batch, padding included); each packed row also
  shows its ratio to the concat row of the same batch size, masks and workers, and its data
  tokens/s (positions/s times the epoch's data share: the measured samples are a shuffled
  subset of the epoch, whose padding is below 0.1 %).
* ``peer``: ``torch.utils.data.DataLoader`` over a map-style memmap dataset (one
  ``__getitem__`` per sample, default collate), the typical hand-written loader.

With ``--loss-masks off,on`` each loader case also runs with a loss-mask file per shard (one
byte per token, named by ``label_masks``: SFT-like spans of untrained and trained tokens, or
with ``--loss-mask-pattern random`` scattered zeros; docs/formats.md "Loss masks"),
and the table shows its ratio to the same case without masks (issue 17's bar: 0.9). Every
batch carries ``source_ids`` in both.

Example:
    python benchmarks/throughput.py --repeats 5 --tokens 64e6
    python benchmarks/throughput.py --modes concat,packed --masks on --no-peer --repeats 5
    python benchmarks/throughput.py --loss-masks off,on --masks off,on --no-peer --repeats 5
"""

from __future__ import annotations

import argparse
import copy
import itertools
import math
import resource
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from _common import (
    VOCAB_SIZE,
    add_common_args,
    bench_config,
    emit,
    ensure_corpus,
    ensure_loss_masks,
    int_list,
    on_off_list,
    str_list,
)
from _throughput_table import columns, notes, table_rows
from _torchdata_loop import torchdata_batches

import streamload

Batch = dict[str, torch.Tensor]

MODES = ("concat", "packed")
PAD_TOKEN_ID = VOCAB_SIZE
"""Pad id of packed mode: one past the corpus's ids (``[0, VOCAB_SIZE)``, EOS 0), so no data
token reads as padding, and it fits the corpus's ``uint32``."""


@dataclass(frozen=True)
class Case:
    """One measured configuration."""

    kind: str  # "raw", "torchdata", "streamload" or "peer"
    batch_size: int
    masks: bool = False
    num_workers: int = 0
    worker_type: str = "thread"
    mode: str = "concat"  # sampling.mode of a "streamload" case
    loss_masks: bool = False  # a loss-mask file per shard (label_masks)
    compact: bool = False  # packing.compact
    mask_layout: str = "int64"  # with masks: int64, int32 (mask_dtype) or cu_seqlens

    @property
    def label(self) -> str:
        workers = f"{self.num_workers} {self.worker_type}" if self.num_workers else "0"
        masks = (
            ("on" + ("" if self.mask_layout == "int64" else f" {self.mask_layout}"))
            if self.masks
            else "off"
        )
        mode = f" {self.mode}" if self.kind == "streamload" else ""
        mode += " compact" if self.compact else ""
        loss = " loss-masks" if self.loss_masks else ""
        return f"{self.kind}{mode} b={self.batch_size} masks={masks} workers={workers}{loss}"

    @property
    def plain_twin(self) -> Case:
        """The same loader case without packing masks."""
        return replace(self, masks=False, mask_layout="int64")

    @property
    def unmasked_twin(self) -> Case:
        """The same case without loss-mask files."""
        return replace(self, loss_masks=False)

    @property
    def concat_twin(self) -> Case:
        """The concat-mode case with the same batch size, masks and workers."""
        return replace(self, mode="concat")


class Windows:
    """The measured windows: stream offsets in loader order, located in their shards."""

    def __init__(self, paths: Sequence[str], starts: np.ndarray, seq_len: int) -> None:
        self.paths = list(paths)
        self.seq_len = seq_len
        self.starts = starts
        self._maps: list[np.ndarray] | None = None
        sizes = [int(np.load(p, mmap_mode="r").shape[0]) for p in self.paths]
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        self.shard = (np.searchsorted(offsets, starts, side="right") - 1).tolist()
        self.local = (starts - offsets[self.shard]).tolist()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_maps": None}

    def maps(self) -> list[np.ndarray]:
        """The shards' memmaps (opened lazily, so each worker process opens its own)."""
        if self._maps is None:
            self._maps = [np.load(p, mmap_mode="r") for p in self.paths]
        return self._maps

    def window(self, i: int) -> np.ndarray:
        """Window i's ``seq_len + 1`` tokens (a memmap view unless it straddles shards)."""
        maps, sid, loc, width = self.maps(), self.shard[i], self.local[i], self.seq_len + 1
        piece = maps[sid][loc : loc + width]
        if piece.shape[0] < width:  # straddles two shards (rare)
            piece = np.concatenate([piece, maps[sid + 1][: width - piece.shape[0]]])
        return piece


def raw_batches(windows: Windows, batch_size: int) -> Iterator[Batch]:
    """The baseline: slice each window into preallocated int64 inputs and labels."""
    length = windows.seq_len
    for first in range(0, len(windows.shard) - batch_size + 1, batch_size):
        inputs = np.empty((batch_size, length), dtype=np.int64)
        labels = np.empty((batch_size, length), dtype=np.int64)
        for row in range(batch_size):
            piece = windows.window(first + row)
            inputs[row] = piece[:-1]
            labels[row] = piece[1:]
        yield {"input_ids": torch.from_numpy(inputs), "labels": torch.from_numpy(labels)}


class PeerDataset(torch.utils.data.Dataset[Batch]):
    """A typical map-style dataset: one window per ``__getitem__``."""

    def __init__(self, windows: Windows) -> None:
        self.windows = windows

    def __len__(self) -> int:
        return len(self.windows.shard)

    def __getitem__(self, index: int) -> Batch:
        tokens = torch.from_numpy(self.windows.window(index).astype(np.int64))
        return {"input_ids": tokens[:-1], "labels": tokens[1:]}


def make_batches(
    case: Case, config: dict[str, Any], windows: Windows
) -> tuple[Iterator[Batch], Callable[[], None]]:
    """The batch iterator of a case and how to stop it. Every case maps the shards anew, as
    the loader does (a reused map would carry the page-table entries of earlier cases)."""
    windows = copy.copy(windows)  # without its maps (Windows.__getstate__)
    if case.kind == "raw":
        return raw_batches(windows, case.batch_size), lambda: None
    if case.kind == "torchdata":
        return torchdata_batches(windows, case.batch_size, case.num_workers), lambda: None
    if case.kind == "peer":
        loader = torch.utils.data.DataLoader(
            PeerDataset(windows), batch_size=case.batch_size, num_workers=case.num_workers
        )
        it = iter(loader)
        return it, lambda: getattr(it, "_shutdown_workers", lambda: None)()
    options = streamload.LoaderOptions(worker_type=case.worker_type)
    stream_loader = streamload.build_loader(
        config, batch_size=case.batch_size, num_workers=case.num_workers, options=options
    )
    # StreamLoader has no public close(); stop its workers so the next case runs alone.
    return iter(stream_loader), stream_loader._close


def touch(batch: Batch) -> None:
    """Read one element per 4 KiB page of every tensor of a page or more, as a consumer
    copying it would (through numpy: a torch call per tensor would cost the harness more
    than small tensors weigh, and more for batches with more keys)."""
    for value in batch.values():
        if value.numel() * value.element_size() >= 4096:
            flat = value.numpy().reshape(-1)
            int(flat[:: 4096 // flat.itemsize].sum())


def timed_batches(
    batches: Iterator[Batch], warmup: int, measured: int, touched: bool = True
) -> float:
    """Seconds ``measured`` batches take after ``warmup`` are skipped (each :func:`touch`-ed
    unless ``touched`` is false)."""
    for _ in range(warmup):
        next(batches)
    start = time.perf_counter()
    for _ in range(measured):
        batch = next(batches)
        if touched:
            touch(batch)
    return time.perf_counter() - start


def measure(
    case: Case, config: dict[str, Any], windows: Windows, args: argparse.Namespace
) -> tuple[float, float, float]:
    """Tokens/s of one case after the warm-up, the bytes per input token of its batches
    (every tensor of a batch: what it must write), and the process's minor page faults per
    timed batch (fresh memory pays one per 4 KiB page written)."""
    batch_tokens = case.batch_size * args.seq_len
    warmup = math.ceil(args.warmup_tokens / batch_tokens)
    measured = math.ceil(args.tokens / batch_tokens)
    batches, close = make_batches(case, config, windows)
    try:
        for _ in range(warmup):
            batch = next(batches)
        weight = sum(v.numel() * v.element_size() for v in batch.values()) / batch_tokens
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        for _ in range(measured):
            batch = next(batches)
            if args.touch:
                touch(batch)
        elapsed = time.perf_counter() - start
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    finally:
        close()
    return measured * batch_tokens / elapsed, weight, faults / measured


def case_config(
    paths: Sequence[str], args: argparse.Namespace, case: Case, samples: int
) -> dict[str, Any]:
    """The loader config of a case: the benchmark config, plus packed mode's pad id and the
    loss-mask files."""
    config = bench_config(paths, seq_len=args.seq_len, masks=case.masks, num_samples=samples)
    if case.mode != "concat":
        config["sampling"]["mode"] = case.mode
        config["pad_token_id"] = PAD_TOKEN_ID
    if case.loss_masks:
        config["sources"][0]["label_masks"] = ensure_loss_masks(paths, args.loss_mask_pattern)
    config["packing"]["compact"] = case.compact
    if case.masks and case.mask_layout == "int32":
        config["packing"]["mask_dtype"] = "int32"
    elif case.masks and case.mask_layout == "cu_seqlens":
        config["packing"]["mask_fields"] = "cu_seqlens"
    return config


def make_cases(args: argparse.Namespace) -> list[Case]:
    """Raw, torchdata, loader (per mode, layout and mask layout) and peer cases per batch
    size."""
    cases: list[Case] = []
    workers = [(0, "thread"), *[(w, t) for w in args.num_workers if w for t in args.worker_types]]
    masks = [(False, "int64")] * (False in args.masks)
    masks += [(True, layout) for layout in args.mask_layouts] * (True in args.masks)
    for b in args.batch_sizes:
        cases.append(Case("raw", b))
        if args.torchdata:
            cases += [Case("torchdata", b, num_workers=w) for w in sorted({w for w, _ in workers})]
        for (mask, layout), (w, t), loss, compact in itertools.product(
            masks, workers, args.loss_masks, args.compact
        ):
            cases += [
                Case("streamload", b, mask, w, t, m, loss, compact, layout) for m in args.modes
            ]
        if args.peer and b in args.peer_batch_sizes:
            cases += [Case("peer", b, False, w, "process") for w in args.num_workers]
    return cases


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(parser)
    parser.add_argument("--corpus-tokens", type=float, default=1e8, help="corpus size")
    parser.add_argument("--tokens", type=float, default=64e6, help="measured input tokens")
    parser.add_argument("--warmup-tokens", type=float, default=16e6, help="skipped tokens")
    parser.add_argument("--batch-sizes", type=int_list, default=[8, 32])
    parser.add_argument("--num-workers", type=int_list, default=[0, 2])
    parser.add_argument("--worker-types", type=str_list, default=["thread", "process"])
    parser.add_argument(
        "--masks",
        type=on_off_list,
        default=[False, True],
        help="off,on",
    )
    parser.add_argument(
        "--modes",
        type=str_list,
        default=["concat"],
        help="sampling modes of the loader cases: concat,packed",
    )
    parser.add_argument(
        "--loss-masks",
        type=on_off_list,
        default=[False],
        help="off,on: loader cases without/with a loss-mask file per shard",
    )
    parser.add_argument(
        "--loss-mask-pattern",
        choices=["spans", "random"],
        default="spans",
        help="the masks' zeros: SFT-like spans (default) or scattered tokens (a worst case)",
    )
    parser.add_argument(
        "--compact", type=on_off_list, default=[False], help="off,on: packing.compact"
    )
    parser.add_argument(
        "--mask-layouts",
        type=str_list,
        default=["int64"],
        help="masks=on cases: int64 (default), int32 (mask_dtype), cu_seqlens (mask_fields)",
    )
    parser.add_argument(
        "--torchdata",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the bare torchdata map-style loop (uint32 windows), 0 and thread workers",
    )
    parser.add_argument("--peer", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--title", default="Throughput", help="the RESULTS.md section's title")
    parser.add_argument("--peer-batch-sizes", type=int_list, default=[8])
    parser.add_argument(
        "--touch",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="read one element per page of each delivered tensor (fault shared pages in)",
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.modes) - set(MODES))
    if unknown or not args.modes:
        parser.error(f"--modes {','.join(args.modes)}: pick from {','.join(MODES)}")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    args.repeats = max(1, args.repeats)
    paths = ensure_corpus(args.data_dir, int(args.corpus_tokens), args.shard_tokens)
    cases = make_cases(args)
    # One pass covers warm-up, measurement and the chunks prefetched beyond them; a multiple
    # of every batch size, so no pass ends with a dropped partial batch (and no warning).
    most = max(
        (args.tokens + args.warmup_tokens) / args.seq_len + 4 * 64 * b for b in args.batch_sizes
    )
    step = int(np.lcm.reduce(args.batch_sizes))
    samples = math.ceil(most / step) * step
    config = bench_config(paths, seq_len=args.seq_len, num_samples=samples)
    stream = streamload.SampleStream.from_config(streamload.load_config(config))
    windows = Windows(paths, stream.window_starts(0, np.arange(samples)), args.seq_len)
    shares = data_shares(paths, args, samples)
    rates: dict[Case, list[float]] = {c: [] for c in cases}
    weights: dict[Case, float] = {}
    faults: dict[Case, list[float]] = {c: [] for c in cases}
    for rep in range(args.repeats):
        for case in cases:
            cfg = case_config(paths, args, case, samples)
            rate, weights[case], fault = measure(case, cfg, windows, args)
            rates[case].append(rate)
            faults[case].append(fault)
            print(
                f"[{rep + 1}/{args.repeats}] {case.label}: {rates[case][-1] / 1e6:.1f} Mtok/s",
                file=sys.stderr,
            )
    rows = table_rows(cases, rates, shares, weights, faults)
    emit(args, args.title, rows, columns(args), notes(args, paths, shares))


def data_shares(paths: Sequence[str], args: argparse.Namespace, samples: int) -> dict[str, float]:
    """Share of data tokens (not padding) in one epoch of each mode's samples."""
    shares = {"concat": 1.0}
    for mode in args.modes:
        if mode == "concat":
            continue
        cfg = case_config(paths, args, Case("streamload", 1, mode=mode), samples)
        stream = streamload.SampleStream.from_config(streamload.load_config(cfg))
        reports = [source.packing_report() for source in stream.sources]
        data = sum(int(r["data_tokens"]) for r in reports)
        shares[mode] = data / (data + sum(int(r["padding_tokens"]) for r in reports))
    return shares


if __name__ == "__main__":
    main()
