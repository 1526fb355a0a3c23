"""Resume latency: a fresh loader's ``load_state_dict(state)`` + first ``next()``, by position.

The pass is ``sampling.num_samples`` samples long (many epochs of the corpus), so a state at
sample 10^7 exists without reading 2·10^10 tokens: the state at a position is written from
the documented envelope (``state.py``), and checked against a state really reached by
iterating (at the first position) and against ``SampleStream.read`` (the resumed batch holds
exactly the samples at the cursor).

Peer reference: ``torchdata``'s ``StatefulDataLoader`` over a map-style memmap dataset of
``num_samples`` items with ``shuffle=True``; on restore its sampler draws the permutation
again and skips the consumed indices one by one (O(position)).

Example:
    python benchmarks/resume.py --positions 1e3,1e7 --repeats 5
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from _common import (
    bench_config,
    bench_parser,
    emit,
    ensure_corpus,
    median,
    parse_sizes,
    worker_label,
)
from torchdata.stateful_dataloader import StatefulDataLoader

import streamload


def state_at(loader: streamload.StreamLoader, samples: int) -> dict[str, Any]:
    """The state of ``loader``'s pass 0 after ``samples`` delivered samples (num_samples set)."""
    state = copy.deepcopy(loader.state_dict())
    stream = loader.stream
    state["cursor"] = {
        "samples": samples,
        "tokens": samples * stream.seq_len,
        "batches": samples // loader.rank.global_batch,
    }
    name = stream.plan.name
    state["sources"] = {name: {"epoch": samples // stream.num_windows, "samples": samples}}
    return state


def check_state(config: dict[str, Any], batch_size: int, position: int) -> None:
    """The written state equals one reached by iterating (ignoring the batch counter)."""
    loader = streamload.build_loader(config, batch_size=batch_size)
    it = iter(loader)
    for _ in range(position // batch_size):
        next(it)
    real = loader.state_dict()
    written = state_at(loader, position)
    real["cursor"]["batches"] = written["cursor"]["batches"]
    if real != written:
        raise RuntimeError(f"written state differs from the real one:\n{written}\n{real}")


def resume_streamload(
    config: dict[str, Any], state: dict[str, Any], batch_size: int, workers: int, kind: str
) -> tuple[float, float, dict[str, torch.Tensor]]:
    """(load_state_dict seconds, first next() seconds, first batch) of a fresh loader."""
    options = streamload.LoaderOptions(worker_type=kind)
    loader = streamload.build_loader(
        config, batch_size=batch_size, num_workers=workers, options=options
    )
    start = time.perf_counter()
    loader.load_state_dict(state)
    loaded = time.perf_counter()
    batch = next(iter(loader))
    first = time.perf_counter()
    loader._close()  # no public close(); stop workers before the next measurement
    return loaded - start, first - loaded, batch


class PeerDataset(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Map-style: item i is window ``i % num_windows`` of one memmap shard."""

    def __init__(self, path: str, seq_len: int, length: int) -> None:
        self.path, self.seq_len, self.length = path, seq_len, length
        self.windows = (np.load(path, mmap_mode="r").shape[0] - 1) // seq_len

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        start = (index % self.windows) * self.seq_len
        piece = np.load(self.path, mmap_mode="r")[start : start + self.seq_len + 1]
        tokens = torch.from_numpy(piece.astype(np.int64))
        return {"input_ids": tokens[:-1], "labels": tokens[1:]}


def peer_state(make: Any) -> dict[str, Any]:
    """A StatefulDataLoader state after one batch."""
    source = make()
    next(iter(source))
    return source.state_dict()


def resume_peer(
    dataset: PeerDataset, batch_size: int, position: int
) -> tuple[float, float, dict[str, torch.Tensor]]:
    """(load_state_dict seconds, first next() seconds, first batch) of StatefulDataLoader."""
    make = lambda: StatefulDataLoader(  # noqa: E731
        dataset, batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    state = peer_state(make)
    # Pretend `position` samples were delivered: the sampler and fetcher counters move on.
    state["_sampler_iter_state"]["samples_yielded"] = position
    state["_sampler_iter_state"]["sampler_iter_state"]["yielded"] = position
    state["_num_yielded"] = position // batch_size
    state["_sampler_iter_yielded"] = position // batch_size
    fresh = make()
    start = time.perf_counter()
    fresh.load_state_dict(state)
    loaded = time.perf_counter()
    batch = next(iter(fresh))
    return loaded - start, time.perf_counter() - loaded, batch


def check_peer(dataset: PeerDataset, batch_size: int, position: int) -> None:
    """The peer's written state resumes where really iterating to ``position`` would."""
    loader = StatefulDataLoader(
        dataset, batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    it = iter(loader)
    for _ in range(position // batch_size):
        next(it)
    expected = next(it)
    _, _, batch = resume_peer(dataset, batch_size, position)
    if not torch.equal(batch["input_ids"], expected["input_ids"]):
        raise RuntimeError("the peer's written state does not resume at the position")


def check_batch(
    stream: streamload.SampleStream, batch: dict[str, torch.Tensor], position: int
) -> None:
    """The resumed batch holds exactly samples position, position + 1, ... of pass 0."""
    ids = np.arange(position, position + batch["input_ids"].shape[0])
    tokens, _ = stream.read(0, ids)
    if not (
        np.array_equal(batch["sample_index"].numpy(), ids)
        and np.array_equal(batch["input_ids"].numpy(), tokens[:, :-1].astype(np.int64))
    ):
        raise RuntimeError(f"resumed batch at {position} does not hold samples {ids[0]}...")


def cases(args: argparse.Namespace) -> list[tuple[str, int, str]]:
    """(kind, workers, worker type) of each measured configuration."""
    out = [("streamload", 0, "thread")]
    out += [("streamload", w, t) for w in args.num_workers if w for t in args.worker_types]
    if args.peer:
        out.append(("peer", 0, "-"))
    return out


def schedule(args: argparse.Namespace) -> list[tuple[int, int, int]]:
    """(repeat, position, case index) in run order: round-robin, the peer's runs last.

    The peer's permutation (num_samples Python ints) leaves a bigger heap behind, which slows
    the fork of process workers, so no loader run comes after it.
    """
    kinds = [kind for kind, _, _ in cases(args)]
    return [
        (rep, position, i)
        for peer_phase in (False, True)
        for rep in range(args.repeats)
        for position in args.positions
        for i, kind in enumerate(kinds)
        if (kind == "peer") == peer_phase
    ]


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Median resume timings per (position, case)."""
    paths = ensure_corpus(args.data_dir, int(args.corpus_tokens), args.shard_tokens)
    num_samples = args.num_samples or int(max(args.positions) * 1.1) + 64 * args.batch_size
    config = bench_config(paths, seq_len=args.seq_len, num_samples=num_samples)
    check_state(config, args.batch_size, min(args.positions))
    base = streamload.build_loader(config, batch_size=args.batch_size)
    states = {p: state_at(base, p) for p in args.positions}
    peer = PeerDataset(paths[0], args.seq_len, num_samples)
    runs: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for rep, position, i in schedule(args):
        kind, workers, wtype = cases(args)[i]
        if kind == "peer":
            if not runs.get((position, i)) and position == min(args.positions):
                check_peer(peer, args.batch_size, position)
            load, first, _ = resume_peer(peer, args.batch_size, position)
        else:
            load, first, batch = resume_streamload(
                config, states[position], args.batch_size, workers, wtype
            )
            check_batch(base.stream, batch, position)
        runs.setdefault((position, i), []).append((load, first))
        print(
            f"[{rep + 1}/{args.repeats}] {position:.0e} {kind} w={workers}: {load + first:.4f} s",
            file=sys.stderr,
        )
    rows = []
    for (position, i), values in runs.items():
        kind, workers, wtype = cases(args)[i]
        rows.append(
            {
                "position": f"{position:.0e}",
                "case": kind,
                "workers": worker_label(workers, wtype),
                "load_s": median(v[0] for v in values),
                "first_s": median(v[1] for v in values),
                "total_s": median(v[0] + v[1] for v in values),
                "worst_s": max(v[0] + v[1] for v in values),
            }
        )
    rows.sort(key=lambda r: (float(r["position"]), r["case"] == "peer"))
    return rows


COLUMNS = [
    ("position", "resume at sample", ""),
    ("case", "case", ""),
    ("workers", "workers", ""),
    ("load_s", "load_state_dict (s)", ".4f"),
    ("first_s", "first next() (s)", ".4f"),
    ("total_s", "total (s)", ".4f"),
    ("worst_s", "worst (s)", ".4f"),
]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = bench_parser(__doc__, ["thread", "process"])
    parser.add_argument("--positions", type=parse_sizes, default=[10**3, 10**7])
    parser.add_argument("--corpus-tokens", type=float, default=1e8, help="corpus size")
    parser.add_argument(
        "--num-samples", type=int, default=None, help="pass length (default: 1.1 x max position)"
    )
    parser.add_argument(
        "--peer",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time torchdata's StatefulDataLoader (map-style, shuffle=True)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    rows = measure(args)
    notes = [
        f"Corpus {args.corpus_tokens:.0e} tokens, seq_len {args.seq_len}, batch {args.batch_size}, "
        "shuffle on; the pass spans many epochs (sampling.num_samples). Median of "
        f"{args.repeats} round-robin repeats (the peer's after all loader runs); each a "
        "fresh loader (build not timed).",
        "Every resumed streamload batch was checked to hold exactly the samples at the cursor; "
        "the written states were checked against states reached by iterating.",
        "peer = torchdata StatefulDataLoader, map-style dataset of num_samples items, "
        "shuffle=True, 0 workers: it re-draws torch.randperm(num_samples) and skips the "
        "consumed indices one by one.",
    ]
    emit(args, "Resume latency", rows, COLUMNS, notes)


if __name__ == "__main__":
    main()
