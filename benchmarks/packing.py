"""Packing plan: build speed and padding of best-fit decreasing over groups, same run baselines.

Documents have log-normal lengths (median 500 tokens, sigma 1, like the corpus of
``_common.py``); only their lengths are needed, so no token file is written. Two tables:

* **Build**: :func:`streamload.plan.packing.document_items` and
  :func:`~streamload.plan.packing.pack_items` (groups of 4096 items) at 10^5..10^7
  documents, with each of its two implementations alone (a Python loop per item; numpy
  steps placing one item of every group at once), against ``np.sort`` of the same item
  lengths (the sort every best fit decreasing starts with), timed in the same run; all
  plans must be identical.
* **Padding**: at each seq_len, samples against the bound ``ceil(tokens / (seq_len + 1))``
  for concat mode (``(tokens - 1) // seq_len`` windows), padded mode (one item per sample),
  packed mode at several group sizes, and best fit decreasing over the whole epoch at once
  (the Python loop with one group: OLMo-core's OBFD).

    python benchmarks/packing.py --docs 100000,1000000,10000000 --seq-lens 2048,8192
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
from _common import add_common_args, emit, int_list, median

from streamload.plan.packing import (
    _LOOP_GROUPS,
    GROUP_SIZE,
    _pack_in_lockstep,
    _pack_in_python,
    document_items,
    pack_bound,
    pack_items,
)


def document_bounds(count: int, seed: int = 0) -> np.ndarray:
    """Stream offsets of ``count`` documents of log-normal length (median 500)."""
    rng = np.random.default_rng([seed, count])
    sizes = np.maximum(1, rng.lognormal(np.log(500), 1.0, count).astype(np.int64))
    return np.concatenate([[0], np.cumsum(sizes)])


def timed(repeats: int, work: Any) -> tuple[float, Any]:
    """Median seconds of ``repeats`` calls of ``work()`` and its last result."""
    times, result = [], None
    for _ in range(repeats):
        began = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - began)
    return median(times), result


def build_row(docs: int, seq_len: int, repeats: int, python_max: int) -> dict[str, Any]:
    bounds = document_bounds(docs)
    items_s, items = timed(repeats, lambda: document_items(bounds, seq_len, "split"))
    lengths = items.lengths.astype(np.int64)
    capacity, group = seq_len + 1, min(GROUP_SIZE, lengths.size)
    sort_s, _ = timed(repeats, lambda: np.sort(lengths))
    pack_s, plan = timed(repeats, lambda: pack_items(lengths, capacity))
    lockstep_s, lockstep = timed(repeats, lambda: _pack_in_lockstep(lengths, capacity, group))
    row: dict[str, Any] = {
        "docs": docs,
        "items": lengths.size,
        "items_s": items_s,
        "pack_s": pack_s,
        "items_per_s": lengths.size / pack_s,
        "sort_s": sort_s,
        "vs_sort": pack_s / sort_s,
        "lockstep_s": lockstep_s,
    }
    if lengths.size <= python_max:
        python_s, python = timed(1, lambda: _pack_in_python(lengths, capacity, group))
        row["python_s"] = python_s
        row["identical"] = all(
            np.array_equal(a.offsets, b.offsets) and np.array_equal(a.items, b.items)
            for a, b in ((plan, lockstep), (plan, python))
        )
    return row


def padding_rows(
    docs: int, seq_len: int, group_sizes: list[int], obfd_max: int, caps: list[int] | None = None
) -> list[dict[str, Any]]:
    bounds = document_bounds(docs)
    items = document_items(bounds, seq_len, "split")
    lengths, capacity = items.lengths.astype(np.int64), seq_len + 1
    tokens = int(lengths.sum())
    bound = pack_bound(lengths, capacity)
    concat = (int(bounds[-1]) - 1) // seq_len
    cases: list[tuple[str, int, float]] = [
        ("concat (windows)", concat, float("nan")),
        ("padded", lengths.size, float("nan")),
    ]
    for group in group_sizes:
        seconds, plan = timed(1, lambda: pack_items(lengths, capacity, group))  # noqa: B023
        cases.append((f"packed, groups of {group}", plan.num_samples, seconds))
    for cap in caps or []:  # sampling.max_documents_per_sample (default groups)
        seconds, plan = timed(1, lambda: pack_items(lengths, capacity, max_items=cap))  # noqa: B023
        cases.append((f"packed, at most {cap} documents a sample", plan.num_samples, seconds))
    if lengths.size <= obfd_max:
        seconds, plan = timed(1, lambda: _pack_in_python(lengths, capacity, lengths.size))
        cases.append(("OBFD, whole epoch (Python loop)", plan.num_samples, seconds))
    return [
        {
            "seq_len": seq_len,
            "docs": docs,
            "case": case,
            "samples": samples,
            "bound": bound,
            "over_bound_pct": 100 * (samples / bound - 1),
            "vs_concat": samples / concat,
            "pad_pct": 0.0
            if case.startswith("concat")
            else 100 * (1 - tokens / (samples * capacity)),
            "seconds": seconds,
        }
        for case, samples, seconds in cases
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    add_common_args(parser)
    parser.add_argument(
        "--docs", type=int_list, default=[100_000, 1_000_000, 10_000_000], help="build table"
    )
    parser.add_argument(
        "--seq-lens", type=int_list, default=[2048, 8192], help="padding table ('': none)"
    )
    parser.add_argument("--padding-docs", type=int, default=1_000_000)
    parser.add_argument("--group-sizes", type=int_list, default=[1024, GROUP_SIZE, 16384])
    parser.add_argument(
        "--python-max", type=int, default=20_000_000, help="most items for the Python loop"
    )
    parser.add_argument(
        "--caps", type=int_list, default=[], help="max_documents_per_sample values to pack with"
    )
    args = parser.parse_args()
    if args.docs:
        emit_build(
            args, [build_row(n, args.seq_len, args.repeats, args.python_max) for n in args.docs]
        )
    if args.seq_lens:
        emit_padding(
            args,
            [
                row
                for seq_len in args.seq_lens
                for row in padding_rows(
                    args.padding_docs, seq_len, args.group_sizes, args.python_max, args.caps
                )
            ],
        )


def emit_build(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """Print and record the build table."""
    emit(
        args,
        f"Packing plan build: items and best fit decreasing (seq_len {args.seq_len})",
        rows,
        [
            ("docs", "documents", ",d"),
            ("items", "items", ",d"),
            ("items_s", "document_items s", ".3f"),
            ("pack_s", "pack_items s", ".3f"),
            ("items_per_s", "items/s", ",.0f"),
            ("sort_s", "np.sort s", ".3f"),
            ("vs_sort", "pack / sort", ".1f"),
            ("lockstep_s", "lockstep s", ".3f"),
            ("python_s", "Python loop s", ".3f"),
            ("identical", "identical", ""),
        ],
        notes=[
            f"Median of {args.repeats} runs in one process (the first run pays the page"
            " faults of fresh arrays); split long documents; groups of"
            f" {GROUP_SIZE} items. pack_items runs the Python loop up to"
            f" {_LOOP_GROUPS} groups and the lockstep numpy steps beyond; both columns time"
            " each implementation alone (the Python loop once, up to"
            f" {args.python_max:,} items). np.sort: of the same item lengths, the sort every"
            " best fit decreasing starts with. identical = the three plans are the same,"
            " sample for sample.",
        ],
    )


def emit_padding(args: argparse.Namespace, padding: list[dict[str, Any]]) -> None:
    """Print and record the padding table."""
    emit(
        args,
        "Packing: samples against the bound ceil(tokens / (seq_len + 1))",
        padding,
        [
            ("seq_len", "seq_len", "d"),
            ("docs", "documents", ",d"),
            ("case", "case", ""),
            ("samples", "samples", ",d"),
            ("bound", "bound", ",d"),
            ("over_bound_pct", "% over bound", ".3f"),
            ("vs_concat", "samples / concat", ".4f"),
            ("pad_pct", "padding %", ".3f"),
            ("seconds", "s", ".2f"),
        ],
        notes=[
            "tokens = tokens of the items (split documents: pieces of a long document share"
            " one token, as concat windows do); concat = (document tokens - 1) // seq_len"
            " windows of seq_len + 1 tokens, no padding but documents cut at window edges;"
            " padding % = pad tokens / sample tokens. OBFD: best fit decreasing over the whole"
            " epoch at once (the Python loop with one group), up to"
            f" {args.python_max:,} items.",
        ],
    )


if __name__ == "__main__":
    main()
