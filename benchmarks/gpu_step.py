"""A small GPT's GPU training step fed by each loader and layout, beside a GPU-resident batch.

Never run in CI or tests (they only check ``--help`` and ``--dry-run``): run it by hand on a
machine with a GPU, one command, about 4 minutes on one H200 for the defaults
(``--budget-s``: no repeat starts that would end past it)::

    python benchmarks/gpu_step.py                        # CUDA: every case, 3 repeats
    python benchmarks/gpu_step.py --device cpu --quick   # a smoke check of every path on CPU
    python benchmarks/gpu_step.py --dry-run              # the cases and settings, nothing run

The step (``_gpt.GPT``: ``--layers`` blocks of ``--width``, bf16 autocast on CUDA, AdamW)
takes its batch through pinned host memory (``LoaderOptions(pin_memory=True)``,
``DataLoader(pin_memory=True)``) and ``.to(device, non_blocking=True)`` copies, and never
synchronizes inside the timed window (no ``loss.item()``). Cases, round-robin per repeat:

* ``resident``: one batch of the layout moved to the GPU once and reused every step: the
  step alone, the floor of the layout.
* ``streamload``: ``build_loader`` with each of ``--num-workers`` (``--worker-type``) per
  layout: ``full`` (int64 ``input_ids``/``labels``), ``compact`` (``packing.compact``:
  ``tokens`` copied in the data's width, widened and shifted on the device, as
  docs/config.md shows), ``packed`` (``sampling.mode = "packed"`` with masks: whole
  documents; ``flatten_cu_seqlens`` on the host, then ``examples/packed_varlen.py``'s
  attention over the flat ``cu_seqlens``: torch's ``torch.nn.attention.varlen.varlen_attn``,
  causal, where flash-attn is not installed).
* ``DataLoader``, ``StatefulDataLoader``: map-style memmap windows of the same corpus in
  streamload's order (``throughput.PeerDataset``), ``--peer-workers`` processes, full layout.

Reported, medians of the repeats: step time (wall over the timed steps, one synchronize at
each end), its ratio to ``resident`` of the same layout (same repeat), time in ``next()``,
GPU idle (CUDA events recorded after ``next()`` and after the optimizer step: the share of
the window in which the GPU had finished one step and the host had not yet enqueued the
next), and tokens/s.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from _common import add_common_args, bench_config, emit, ensure_corpus, int_list, median, str_list
from _gpt import GPT, VARLEN
from throughput import PAD_TOKEN_ID, PeerDataset, Windows

import streamload
from streamload.ops.varlen import flatten_cu_seqlens

Batch = dict[str, torch.Tensor]
Prepared = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None, int]
"""What the step takes, on the device: input ids, labels, positions, flat cu_seqlens, max."""
LAYOUTS = ("full", "compact", "packed")
PEERS = ("DataLoader", "StatefulDataLoader")
QUICK = {"batch_size": 2, "seq_len": 128, "steps": 3, "warmup_steps": 1, "repeats": 1,
         "width": 64, "layers": 2, "heads": 4, "vocab": 1024, "num_workers": [0, 2],
         "peer_workers": 1}  # fmt: skip


@dataclass(frozen=True)
class Case:
    """One measured configuration."""

    kind: str  # "resident", "streamload" or one of PEERS
    layout: str = "full"
    num_workers: int = 0
    worker_type: str = "thread"

    @property
    def label(self) -> str:
        workers = f" workers={self.num_workers} {self.worker_type}" if self.num_workers else ""
        return f"{self.kind} {self.layout}{workers}"

    @property
    def floor(self) -> Case:
        return Case("resident", self.layout)


@dataclass
class Bench:
    """What every case shares: settings, corpus, model, optimizer."""

    args: argparse.Namespace
    device: torch.device
    paths: list[str]
    model: GPT
    optim: torch.optim.Optimizer


def case_config(bench: Bench, layout: str) -> dict[str, Any]:
    """The loader config of a layout over the benchmark corpus."""
    args = bench.args
    samples = (args.warmup_steps + args.steps + 16 * 64) * args.batch_size
    config = bench_config(
        bench.paths, seq_len=args.seq_len, masks=layout == "packed", num_samples=samples
    )
    if layout == "packed":
        config["sampling"]["mode"] = "packed"
        config["pad_token_id"] = PAD_TOKEN_ID
    if layout == "compact":
        config["packing"]["compact"] = True
    return config


def prepare(batch: Batch, device: torch.device) -> Prepared:
    """Host batch → the step's device tensors (non-blocking copies from pinned memory)."""

    def put(key: str) -> torch.Tensor:
        return batch[key].to(device, non_blocking=True)

    if "tokens" in batch:  # compact: widen and shift on the device (docs/config.md)
        tokens = put("tokens").long()
        ids, labels = tokens[:, :-1], tokens[:, 1:]
        if "label_mask" in batch:
            labels = labels.masked_fill(~put("label_mask"), -100)
        return ids, labels, None, None, 0
    if "cu_seqlens" not in batch:
        return put("input_ids"), put("labels"), None, None, 0
    cu_seqlens, max_seqlen = flatten_cu_seqlens(batch["cu_seqlens"])  # host: no device sync
    flat = cu_seqlens.to(device, non_blocking=True)
    return put("input_ids"), put("labels"), put("position_ids"), flat, max_seqlen


def train_step(bench: Bench, prepared: Prepared) -> torch.Tensor:
    """Forward, loss, backward, AdamW step; the loss stays on the device."""
    ids, labels, positions, cu_seqlens, max_seqlen = prepared
    vocab = bench.model.vocab
    labels = torch.where(labels >= 0, labels % vocab, -100)
    with torch.autocast(bench.device.type, torch.bfloat16, enabled=bench.device.type == "cuda"):
        logits = bench.model(ids, positions, cu_seqlens, max_seqlen)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100)
    loss.backward()
    bench.optim.step()
    bench.optim.zero_grad(set_to_none=True)
    return loss.detach()


def open_case(case: Case, bench: Bench) -> tuple[Iterator[Batch | Prepared], Callable[[], Any]]:
    """A case's batches (host batches; ``resident``: one prepared batch again and again)."""
    args, pin = bench.args, bench.device.type == "cuda"
    config = case_config(bench, case.layout)
    if case.kind == "resident":
        with streamload.build_loader(config, batch_size=args.batch_size) as loader:
            prepared = prepare(next(iter(loader)), bench.device)
        return itertools.repeat(prepared), lambda: None
    if case.kind == "streamload":
        options = streamload.LoaderOptions(worker_type=case.worker_type, pin_memory=pin)
        loader = streamload.build_loader(
            config, batch_size=args.batch_size, num_workers=case.num_workers, options=options
        )
        return iter(loader), loader.close
    from torchdata.stateful_dataloader import StatefulDataLoader

    stream = streamload.SampleStream.from_config(streamload.load_config(config))
    windows = Windows(bench.paths, stream.window_starts(0, np.arange(config["sampling"]
                      ["num_samples"])), args.seq_len)  # fmt: skip
    make = torch.utils.data.DataLoader if case.kind == "DataLoader" else StatefulDataLoader
    peer = make(PeerDataset(windows), batch_size=args.batch_size,
                num_workers=case.num_workers, pin_memory=pin)  # fmt: skip
    it = iter(peer)
    return it, lambda: getattr(it, "_shutdown_workers", lambda: None)()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(case: Case, bench: Bench) -> dict[str, float]:
    """Warm up, then time the steps: wall per step, time in ``next()``, GPU idle share."""
    args, device = bench.args, bench.device
    batches, close = open_case(case, bench)
    cuda = device.type == "cuda"
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(args.steps)] if cuda else []
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(args.steps)] if cuda else []
    try:
        for _ in range(args.warmup_steps):
            batch = next(batches)
            train_step(bench, batch if isinstance(batch, tuple) else prepare(batch, device))
        synchronize(device)
        wait, began = 0.0, time.perf_counter()
        for i in range(args.steps):
            asked = time.perf_counter()
            batch = next(batches)
            wait += time.perf_counter() - asked
            if cuda:
                starts[i].record()
            train_step(bench, batch if isinstance(batch, tuple) else prepare(batch, device))
            if cuda:
                ends[i].record()
        synchronize(device)
        wall = time.perf_counter() - began
    finally:
        close()
    idle = float("nan")
    if cuda and args.steps > 1:  # gaps between one step's end and the next one's start
        gaps = sum(ends[i].elapsed_time(starts[i + 1]) for i in range(args.steps - 1))
        idle = gaps / starts[0].elapsed_time(ends[-1])
    tokens = args.steps * args.batch_size * args.seq_len
    return {"step_s": wall / args.steps, "wait_s": wait / args.steps, "idle": idle,
            "tokens_s": tokens / wall}  # fmt: skip


def make_cases(args: argparse.Namespace) -> list[Case]:
    """Floors, streamload per layout and worker count, the peers."""
    cases = [Case("resident", layout) for layout in args.layouts]
    cases += [
        Case("streamload", layout, w, args.worker_type if w else "thread")
        for layout in args.layouts
        for w in args.num_workers
    ]
    if "full" not in args.layouts and args.peers:
        cases.insert(0, Case("resident", "full"))  # the peers' floor
    return cases + [Case(peer, "full", args.peer_workers, "process") for peer in args.peers]


def table_rows(cases: Sequence[Case], runs: dict[Case, list[dict[str, float]]]) -> list[dict]:
    """Medians over repeats; the ratio to the layout's resident floor, per repeat."""
    rows = []
    for case in cases:
        mine, floor = runs[case], runs[case.floor][: len(runs[case])]
        rows.append({
            "loader": case.kind, "layout": case.layout,
            "workers": f"{case.num_workers} {case.worker_type}" if case.num_workers else "0",
            "step_ms": median(r["step_s"] for r in mine) * 1e3,
            "ratio": median(r["step_s"] / f["step_s"] for r, f in zip(mine, floor, strict=True)),
            "wait_ms": median(r["wait_s"] for r in mine) * 1e3,
            "idle_pct": median(r["idle"] for r in mine) * 100,
            "mtok_s": median(r["tokens_s"] for r in mine) / 1e6,
            "repeats": len(mine),
        })  # fmt: skip
    return rows


COLUMNS = [
    ("loader", "loader", ""),
    ("layout", "layout", ""),
    ("workers", "workers", ""),
    ("step_ms", "step ms", ".2f"),
    ("ratio", "vs resident", ".3f"),
    ("wait_ms", "in next() ms/step", ".3f"),
    ("idle_pct", "GPU idle %", ".1f"),
    ("mtok_s", "M tok/s", ".3g"),
    ("repeats", "repeats", "d"),
]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    add_common_args(parser)
    parser.set_defaults(repeats=3)
    add = parser.add_argument
    add("--device", default="cuda", help="cuda (default) or cpu (a smoke check)")
    add("--quick", action="store_true", help="a tiny model and few steps (any device)")
    add("--dry-run", action="store_true", help="print the cases and settings, run nothing")
    add("--budget-s", type=float, default=240, help="no repeat that would end past this")
    add("--corpus-tokens", type=float, default=1e8, help="corpus size")
    add("--batch-size", type=int, default=16)
    add("--steps", type=int, default=50, help="timed steps per case")
    add("--warmup-steps", type=int, default=10, help="untimed steps first")
    add("--width", type=int, default=768, help="model width")
    add("--layers", type=int, default=4)
    add("--heads", type=int, default=12)
    add("--vocab", type=int, default=32768, help="head size (ids taken modulo it)")
    add("--layouts", type=str_list, default=list(LAYOUTS), help=",".join(LAYOUTS))
    add("--num-workers", type=int_list, default=[0, 4], help="streamload workers")
    add("--worker-type", default="thread", choices=("thread", "process"))
    add("--peers", type=str_list, default=list(PEERS), help=",".join(PEERS))
    add("--peer-workers", type=int, default=4, help="peer worker processes")
    args = parser.parse_args(argv)
    if args.quick:  # the quick sizes, except where given on the command line
        given = {a.split("=")[0].lstrip("-").replace("-", "_") for a in (argv or sys.argv[1:])}
        for key, value in QUICK.items():
            if key not in given:
                setattr(args, key, value)
    if not set(args.layouts) <= set(LAYOUTS) or not set(args.peers) <= set(PEERS):
        parser.error(f"--layouts from {','.join(LAYOUTS)}, --peers from {','.join(PEERS)}")
    if min(args.steps, args.batch_size, args.repeats) < 1 or args.width % args.heads:
        parser.error("--steps, --batch-size, --repeats >= 1; --width a multiple of --heads")
    return args


def run(args: argparse.Namespace, device: torch.device) -> tuple[list[dict[str, Any]], int]:
    """Build the corpus and the model, run the cases round-robin; the rows, the parameters."""
    torch.manual_seed(0)
    paths = ensure_corpus(args.data_dir, int(args.corpus_tokens), args.shard_tokens)
    model = GPT(args.vocab, args.seq_len, args.width, args.layers, args.heads).to(device)
    bench = Bench(args, device, paths, model, torch.optim.AdamW(model.parameters(), lr=1e-4))
    cases = make_cases(args)
    runs: dict[Case, list[dict[str, float]]] = {case: [] for case in cases}
    began = time.perf_counter()
    for rep in range(args.repeats):
        spent = time.perf_counter() - began
        if rep and spent + spent / rep > args.budget_s:  # the next repeat would end past it
            print(f"--budget-s {args.budget_s:g} reached: {rep} repeat(s)", file=sys.stderr)
            break
        for case in cases:
            runs[case].append(measure(case, bench))
            print(f"[{rep + 1}/{args.repeats}] {case.label}: "
                  f"{runs[case][-1]['step_s'] * 1e3:.2f} ms/step", file=sys.stderr)  # fmt: skip
    return table_rows(cases, runs), sum(p.numel() for p in model.parameters())


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.dry_run:
        for case in make_cases(args):
            print(case.label)
        print({k: v for k, v in vars(args).items() if k not in ("json", "record", "dry_run")})
        return
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device here: run on a GPU machine, or --device cpu --quick")
    rows, params = run(args, device)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "none (CPU run)"
    notes = [
        f"GPU: {gpu}. Model: GPT {args.layers} x {args.width} ({args.heads} heads), vocab "
        f"{args.vocab} (ids modulo it), {params / 1e6:.1f}M parameters, bf16 autocast on "
        f"CUDA, AdamW; batch {args.batch_size} x {args.seq_len}.",
        f"Per case and repeat: {args.warmup_steps} warm-up steps, {args.steps} timed; "
        "pinned host batches, non-blocking copies, no synchronize inside the window.",
        "GPU idle = sum over steps of (next step's start event - this step's end event) / "
        "(first start - last end): the GPU waiting on the host between steps (the loader, "
        "the copies' set-up); launch gaps inside a step are in the step time, as in resident.",
        "packed: flatten_cu_seqlens on the host, then examples/packed_varlen.py's attention: "
        f"here {VARLEN.attention_kind(device)}.",
    ]
    title = f"GPU step: loaders and layouts beside a GPU-resident batch ({args.device})"
    emit(args, title, rows, COLUMNS, notes)


if __name__ == "__main__":
    main()
