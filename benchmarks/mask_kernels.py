"""What a loss-mask file costs per token, step by step, and the kernels that could mark labels.

Issue 17 asks that a loss-mask file cost at most a tenth of the loader's throughput. This
script measures the floor of that cost in numpy and torch on one chunk (``--windows``
shuffled windows of ``seq_len + 1`` tokens, fresh windows every repeat, so the reads come
from memory, not the CPU cache), as nanoseconds per token beside raw memmap slicing of the
same windows:

* ``token gather``: the windows' tokens, one fancy index over a sliding-window view of the
  mapped ``.npy`` shard (what ``ShardSet`` does; the baseline, ratio 1.00);
* ``mask gather``: the same windows of the mask file (uint8);
* ``labels astype``: ``tokens[:, 1:].astype(int64)``, which every batch pays;
* ``mark (streamload)``: ``ops.masks.mask_untrained`` on those labels;
* alternatives that make the masked labels from tokens and mask in other ways (each must give
  the same labels; the script checks): the labels made first and ``-100`` written where
  untrained with ``np.copyto`` (one block), the trained tokens copied into a ``-100`` block
  (``np.copyto(where=trained)``, one pass instead of astype + mark), arithmetic on int64
  (``(t + 100) * m - 100``) and torch (``masked_fill_``, one thread).

The gathers read fresh windows; each computing step runs once untimed first, so its output
is written into pages the allocator already holds (as in a running loader, where chunks of
one size follow each other). Cases run round-robin within each repeat; medians.

    python benchmarks/mask_kernels.py --repeats 30
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from _common import add_common_args, emit, ensure_corpus, ensure_loss_masks, median
from numpy.lib.stride_tricks import sliding_window_view

from streamload.ops.masks import IGNORE_INDEX, mask_untrained

Kernel = Callable[[np.ndarray, np.ndarray], Any]


def _mark_streamload(tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    labels = tokens[:, 1:].astype(np.int64)
    mask_untrained(labels, mask)
    return labels


def _mark_copyto(tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    labels = tokens[:, 1:].astype(np.int64)
    np.copyto(labels, IGNORE_INDEX, where=mask[:, 1:] == 0)
    return labels


def _copy_trained(tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    labels = np.full((tokens.shape[0], tokens.shape[1] - 1), IGNORE_INDEX, dtype=np.int64)
    np.copyto(labels, tokens[:, 1:], where=mask[:, 1:] != 0)
    return labels


def _arithmetic(tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    labels = tokens[:, 1:].astype(np.int64)
    labels += 100
    labels *= mask[:, 1:] != 0
    labels -= 100
    return labels


def _torch_fill(tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    labels = torch.from_numpy(tokens[:, 1:].astype(np.int64))
    labels.masked_fill_(torch.from_numpy(mask[:, 1:] == 0), IGNORE_INDEX)
    return labels.numpy()


MARKERS: dict[str, Kernel] = {
    "mark (streamload)": _mark_streamload,
    "copyto -100 where untrained": _mark_copyto,
    "copyto trained into -100": _copy_trained,
    "int64 arithmetic": _arithmetic,
    "torch masked_fill_": _torch_fill,
}


def measure(args: argparse.Namespace) -> dict[str, list[float]]:
    """Seconds per token of each step, one list per case (a value per repeat)."""
    paths = ensure_corpus(args.data_dir, args.shard_tokens, args.shard_tokens)
    tokens_map = np.load(paths[0], mmap_mode="r")
    mask_map = np.memmap(ensure_loss_masks(paths[:1])[0], dtype=np.uint8, mode="r")
    width = args.seq_len + 1
    rng = np.random.default_rng(0)
    count = args.windows * width
    times: dict[str, list[float]] = {}

    def timed(name: str, fn: Callable[..., Any], *inputs: Any, warm: bool = True) -> Any:
        if warm:  # once untimed: the allocator has the output's pages, as in a running loader
            fn(*inputs)
        start = time.perf_counter()
        out = fn(*inputs)
        times.setdefault(name, []).append((time.perf_counter() - start) / count)
        return out

    def gather(mapped: np.ndarray, local: np.ndarray) -> np.ndarray:
        return sliding_window_view(mapped, width)[local]

    for _ in range(args.repeats):
        local = rng.integers(0, tokens_map.shape[0] - width, args.windows)
        tokens = timed("token gather", gather, tokens_map, local, warm=False)
        mask = timed("mask gather", gather, mask_map, local, warm=False)
        timed("labels astype", np.ndarray.astype, tokens[:, 1:], np.int64)
        expected = None
        for name, kernel in MARKERS.items():
            got = timed(name, kernel, tokens, mask)
            expected = got if expected is None else expected
            if not np.array_equal(got, expected):
                raise AssertionError(f"{name} gives other labels than mask_untrained")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--windows", type=int, default=512, help="windows per chunk")
    parser.set_defaults(repeats=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    times = measure(args)
    base = median(times["token gather"])
    rows = [
        {"step": name, "ns": median(values) * 1e9, "ratio": median(values) / base}
        for name, values in times.items()
    ]
    notes = [
        f"Chunk: {args.windows} windows of {args.seq_len + 1} uint32 tokens, fresh random "
        f"windows of one {args.shard_tokens}-token NPY shard and its span mask file every "
        f"repeat; median of {args.repeats} round-robin repeats; page cache warm.",
        "ratio = median ns per token / median of the token gather (raw memmap slicing); the "
        "marking rows include the labels astype they start from.",
    ]
    columns = [("step", "step", ""), ("ns", "ns per token", ".3f"), ("ratio", "ratio", ".2f")]
    emit(args, "Loss-mask kernels", rows, columns, notes)


if __name__ == "__main__":
    main()
