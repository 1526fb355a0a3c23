"""VSL vs concat: a tiny causal transformer's CPU training step at fixed tokens per step.

``sampling.mode = "vsl"`` cuts documents into pieces of power-of-two lengths and gives every
step ``tokens_per_batch`` tokens of one length ``L <= max_seq_len``; concat mode gives every
step the same tokens as rows of ``max_seq_len``. Causal attention costs ``O(L)`` per token,
so at fixed tokens per step a VSL step is cheaper by what attention weighs in the model.

The model is a plain-torch pre-norm transformer (learned positions, ``--layers`` blocks of
``--d-model`` with ``--heads`` heads, attention by
``scaled_dot_product_attention(is_causal=True)``, GELU MLP of 4x, untied head), float32 on
``--threads`` CPU threads, AdamW. Its vocabulary is ``--vocab``: token ids are taken modulo
it (the corpus has 128,256 ids; a full-size head would dwarf the rest of a tiny model).

Cases, round-robin within each repeat (``--warmup-steps`` untimed steps first, each):

* ``concat``: ``build_loader`` at ``seq_len = max_seq_len``, ``tokens / max_seq_len`` rows.
* ``vsl <curriculum>``: the same corpus, ``min_seq_len .. max_seq_len``, ``--curricula``.
  Every repeat times the same steps (the first of the epoch after the warm-up).
* ``model L``: the model alone on a fixed random batch of ``tokens / L`` rows of ``L``, for
  every VSL length: the step's cost by length, weighed by the epoch's share of steps of each
  length into an estimate for a whole VSL epoch (the timed window's mix is a small sample).

Per step: the wall time in ``next(loader)`` and, apart, of the training step (forward,
backward, optimizer step). A case's time per repeat is its mean over the timed steps;
the table shows medians over repeats, and ratios to concat taken per repeat.

Example:
    python benchmarks/vsl_step.py
    python benchmarks/vsl_step.py --seq-len 1024 --tokens 16384 --curricula natural,grow_p2
"""

from __future__ import annotations

import argparse
import collections
import gc
import itertools
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from _common import add_common_args, bench_config, emit, ensure_corpus, median, str_list
from _gpt import Block
from torch import nn

import streamload

Batch = dict[str, torch.Tensor]
CURRICULA = ("natural", "grow_p2", "grow_linear", "cyclic_p2")


class TinyLM(nn.Module):
    """Token and learned position embeddings, blocks, final norm, untied head."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.embed = nn.Embedding(args.vocab, args.d_model)
        self.position = nn.Embedding(args.seq_len, args.d_model)
        self.blocks = nn.ModuleList(Block(args.d_model, args.heads) for _ in range(args.layers))
        self.norm = nn.LayerNorm(args.d_model)
        self.head = nn.Linear(args.d_model, args.vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids) + self.position(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


class TrainStep:
    """Forward, loss, backward and AdamW step of one batch (ids taken modulo the vocabulary)."""

    def __init__(self, args: argparse.Namespace) -> None:
        torch.manual_seed(0)
        self.vocab = args.vocab
        self.model = TinyLM(args)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)

    def __call__(self, batch: Batch) -> None:
        ids = batch["input_ids"] % self.vocab
        labels = batch["labels"]
        labels = torch.where(labels >= 0, labels % self.vocab, labels)
        logits = self.model(ids)
        loss = F.cross_entropy(logits.view(-1, self.vocab), labels.view(-1), ignore_index=-100)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()


@dataclass(frozen=True)
class Case:
    """One measured configuration."""

    kind: str  # "concat", "vsl" or "model"
    curriculum: str = ""
    length: int = 0  # "model": the batch's row length

    @property
    def label(self) -> str:
        if self.kind == "vsl":
            return f"vsl {self.curriculum}"
        return f"model L={self.length}" if self.kind == "model" else "concat"


@dataclass(frozen=True)
class Run:
    """One timed window: each step's row length, time in ``next()`` and training time."""

    lengths: list[int]
    next_s: list[float]
    train_s: list[float]
    open_s: float = float("nan")  # loader cases: build + first batch, warm caches

    def mean_train(self) -> float:
        """Mean training time per timed step."""
        return sum(self.train_s) / len(self.train_s)


def case_config(paths: Sequence[str], args: argparse.Namespace, case: Case) -> dict[str, Any]:
    """The loader config of a loader case."""
    # concat: a pass of whole batches that outlasts the timed window (no dropped-tail warning)
    rows = args.tokens // args.seq_len
    samples = None if case.kind == "vsl" else rows * 4 * (1 + args.warmup_steps + args.steps)
    config = bench_config(paths, seq_len=args.seq_len, num_samples=samples)
    if case.kind == "vsl":
        config["sampling"].update(
            mode="vsl",
            min_seq_len=args.min_seq_len,
            tokens_per_batch=args.tokens,
            curriculum=case.curriculum,
        )
    return config


def open_loader(config: dict[str, Any], args: argparse.Namespace) -> Any:
    """A loader of the config: concat with ``tokens / seq_len`` rows, vsl sizing itself."""
    vsl = config["sampling"].get("mode") == "vsl"
    rows = None if vsl else args.tokens // args.seq_len
    return streamload.build_loader(config, batch_size=rows, num_workers=args.num_workers)


def synthetic_batch(args: argparse.Namespace, length: int) -> Batch:
    """A fixed random batch of ``tokens / length`` rows of ``length`` inputs."""
    gen = torch.Generator().manual_seed(length)
    tokens = torch.randint(0, args.vocab, (args.tokens // length, length + 1), generator=gen)
    return {"input_ids": tokens[:, :-1], "labels": tokens[:, 1:]}


def measure(case: Case, step: TrainStep, configs: dict[Case, Any], args: argparse.Namespace) -> Run:
    """Warm up, then time the case's steps: ``next()`` and the training step apart."""
    if case.kind == "model":
        batch = synthetic_batch(args, case.length)
        return timed(step, itertools.repeat(batch), args.warmup_steps, args.length_steps)
    began = time.perf_counter()
    with open_loader(configs[case], args) as loader:
        batches = iter(loader)
        first = next(batches)
        opened = time.perf_counter() - began
        run = timed(step, itertools.chain([first], batches), args.warmup_steps, args.steps)
    return Run(run.lengths, run.next_s, run.train_s, opened)


def timed(step: TrainStep, batches: Iterator[Batch], warmup: int, steps: int) -> Run:
    """``warmup`` untimed steps, then ``steps`` timed ones."""
    for _ in range(warmup):
        step(next(batches))
    gc.collect()
    run = Run([], [], [])
    for _ in range(steps):
        asked = time.perf_counter()
        batch = next(batches)
        got = time.perf_counter()
        step(batch)
        run.train_s.append(time.perf_counter() - got)
        run.next_s.append(got - asked)
        run.lengths.append(batch["input_ids"].shape[1])
    return run


def prime(
    step: TrainStep, configs: dict[Case, Any], args: argparse.Namespace
) -> collections.Counter[int]:
    """First-use costs before the repeats: each loader built and read once (imports, the vsl
    piece plan built or read from its cache), one step at every length (kernels, allocator).
    Returns the steps per length of one vsl epoch."""
    epoch = collections.Counter[int]()
    for case, config in configs.items():
        with open_loader(config, args) as loader:
            next(iter(loader))
            if case.kind == "vsl" and not epoch:  # every curriculum orders the same steps
                stream = loader.stream
                epoch.update(stream.step_length(0, s) for s in range(len(loader)))
    for length in sorted(epoch):
        step(synthetic_batch(args, length))
    return epoch


def table_rows(
    cases: Sequence[Case],
    runs: dict[Case, list[Run]],
    epoch: collections.Counter[int],
) -> list[dict[str, Any]]:
    """One row per case, then the epoch estimate; ratios to concat's same-repeat time."""
    base = [r.mean_train() for r in runs[Case("concat")]]
    total = sum(epoch.values())
    rows = []
    for case in cases:
        mine = runs[case]
        trains = [r.mean_train() for r in mine]
        loads = [sum(r.next_s) / len(r.next_s) for r in mine] if case.kind != "model" else []
        seen = collections.Counter(mine[0].lengths)
        rows.append(
            {
                "case": case.label,
                "steps": len(mine[0].lengths),
                "lengths": " ".join(f"{n}x{c}" for n, c in sorted(seen.items())),
                "epoch_share": epoch[case.length] / total if case.kind == "model" else None,
                "train_ms": median(trains) * 1e3,
                "ratio": median(t / b for t, b in zip(trains, base, strict=True)),
                "next_ms": median(loads) * 1e3 if loads else None,
                "next_share": median(n / t for n, t in zip(loads, trains, strict=True))
                if loads
                else None,
                "open_ms": median(r.open_s for r in mine) * 1e3 if loads else None,
                "runs_train_ms": [round(t * 1e3, 2) for t in trains],
            }
        )
    lengths = {c.length: runs[c] for c in cases if c.kind == "model"}
    estimate = [
        sum(epoch[n] / total * lengths[n][i].mean_train() for n in epoch) for i in range(len(base))
    ]
    rows.append(
        {
            "case": "vsl epoch (estimate)",
            "lengths": "epoch mix",
            "epoch_share": 1.0,
            "train_ms": median(estimate) * 1e3,
            "ratio": median(e / b for e, b in zip(estimate, base, strict=True)),
        }
    )
    return rows


COLUMNS = [
    ("case", "case", ""),
    ("steps", "timed steps", "d"),
    ("lengths", "row lengths seen (L x steps)", ""),
    ("epoch_share", "share of a vsl epoch's steps", ".3f"),
    ("train_ms", "train step ms", ".1f"),
    ("ratio", "train step vs concat", ".3f"),
    ("next_ms", "in next() ms/step", ".3f"),
    ("next_share", "next() / train step", ".5f"),
    ("open_ms", "build + first batch ms", ".1f"),
]


def notes(args: argparse.Namespace, epoch: collections.Counter[int]) -> list[str]:
    total = sum(epoch.values())
    mean_length = sum(n * c for n, c in epoch.items()) / total
    return [
        f"Corpus: {args.corpus_tokens:.3g}+ uint32 tokens in NPY shards of {args.shard_tokens} "
        "(log-normal documents, median ~500 tokens, 1% above ~5,100), shuffle on; "
        f"page cache warm. {args.tokens} input tokens per step; concat rows of {args.seq_len}; "
        f"vsl lengths {args.min_seq_len}..{args.seq_len}: an epoch of {total} steps, mean row "
        f"length {mean_length:.0f}. Loader workers: {args.num_workers}.",
        f"Model: {args.layers} blocks, d_model {args.d_model}, {args.heads} heads, vocabulary "
        f"{args.vocab} (ids modulo it), float32, AdamW, {args.threads} torch thread(s).",
        f"Per case and repeat: {args.warmup_steps} warm-up step(s), then {args.steps} timed "
        f"steps (model L: {args.length_steps}); {args.repeats} round-robin repeats, medians "
        "shown; ratios to concat per repeat, then the median. Before the repeats every loader "
        "was built and read once (imports; vsl builds or reads its piece plan) and the model "
        "ran one step at every length; build + first batch is then timed in each repeat "
        "(warm caches), outside the steps.",
        "train step = forward + loss + backward + AdamW step, mean over the timed steps; "
        "next() = the time in next(loader), mean per step (0 workers: the loader's whole "
        "cost, on the training thread). vsl epoch (estimate) = the model-L times weighted by "
        "the epoch's share of steps of each length; any curriculum orders the same steps, so "
        "it holds for all of them.",
    ]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    add_common_args(parser)
    parser.set_defaults(seq_len=2048)
    parser.add_argument("--corpus-tokens", type=float, default=1e7, help="corpus size")
    parser.add_argument("--tokens", type=int, default=8192, help="input tokens per step")
    parser.add_argument("--min-seq-len", type=int, default=64, help="vsl's shortest length")
    parser.add_argument("--curricula", type=str_list, default=["natural"], help="vsl orders")
    parser.add_argument("--steps", type=int, default=20, help="timed loader steps per case")
    parser.add_argument("--length-steps", type=int, default=3, help="timed steps per model L")
    parser.add_argument("--warmup-steps", type=int, default=1, help="untimed steps first")
    parser.add_argument("--num-workers", type=int, default=0, help="loader workers")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=1024, help="model vocabulary")
    args = parser.parse_args(argv)
    if not set(args.curricula) <= set(CURRICULA) or not args.curricula:
        parser.error(f"--curricula {','.join(args.curricula)}: pick from {','.join(CURRICULA)}")
    if min(args.steps, args.length_steps, args.repeats, args.threads) < 1:
        parser.error("--steps, --length-steps, --repeats and --threads must be >= 1")
    if args.tokens % args.seq_len or args.d_model % args.heads:
        parser.error("--tokens must be a multiple of --seq-len, --d-model of --heads")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    paths = ensure_corpus(args.data_dir, int(args.corpus_tokens), args.shard_tokens)
    loaders = [Case("concat"), *(Case("vsl", c) for c in args.curricula)]
    configs = {case: case_config(paths, args, case) for case in loaders}
    step = TrainStep(args)
    epoch = prime(step, configs, args)
    cases = loaders + [Case("model", length=n) for n in sorted(epoch)]
    runs: dict[Case, list[Run]] = {c: [] for c in cases}
    for rep in range(args.repeats):
        for case in cases:
            runs[case].append(measure(case, step, configs, args))
            print(
                f"[{rep + 1}/{args.repeats}] {case.label}: "
                f"{runs[case][-1].mean_train() * 1e3:.1f} ms/step",
                file=sys.stderr,
            )
    rows = table_rows(cases, runs, epoch)
    title = (
        f"VSL vs concat: tiny transformer train step on CPU, {args.tokens} tokens per step, "
        f"max_seq_len {args.seq_len}"
    )
    emit(args, title, rows, COLUMNS, notes(args, epoch))


if __name__ == "__main__":
    main()
