"""Packing plan: build speed and padding of best-fit decreasing, side by side with OLMo-core.

Documents have log-normal lengths (median 500 tokens, sigma 1, like the corpus of
``_common.py``); only their lengths are needed, so no token file is written. Two tables:

* **Build**: :func:`streamload.plan.packing.document_items` and
  :func:`~streamload.plan.packing.pack_items` at 10^5..10^7 documents: the default (one best
  fit over the whole epoch, in steps per (size, free space), then the refill of the bins it
  left with free space), the best fit alone, the grouped rule of before (groups of 4096),
  the whole-epoch best fit as a per-item Python loop (must give the best fit's plan) and
  ``np.sort`` of the same item lengths (the sort every best fit decreasing starts with);
  medians of interleaved repeats.
* **Padding**: at each seq_len, samples against the bound ``ceil(tokens / (seq_len + 1))``
  for concat mode (``(tokens - 1) // seq_len`` windows), padded mode (one item per sample),
  packed mode by default, the best fit alone and at several group sizes, and OLMo-core's
  ``InstancePacker`` (OBFD) on the same documents under its own rules (pieces of ``seq_len``
  tokens, instances of ``seq_len``; bound ``ceil(tokens / seq_len)``), run in another Python
  when ``olmo_core`` does not import here (``--olmo-python``, ``$OLMO_PYTHON``,
  ``/tmp/olmo/bin/python``); streamload's best fit alone over OLMo-core's own pieces and
  capacity must give its sample count (the default, refilled, then gives fewer or as many).

    python benchmarks/packing.py --docs 100000,1000000,10000000 --seq-lens 2048,8192
    python benchmarks/packing.py --docs '' --padding-docs '' --seeds 10   # draws vs OLMo-core
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _common import add_common_args, emit, int_list, median
from _olmo_packer import olmo_fragments, olmo_pack, olmo_python

from streamload.plan._pack_levels import pack_by_levels
from streamload.plan.packing import (
    GROUP_SIZE,
    SamplePlan,
    _pack_in_python,
    document_items,
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


def interleaved(
    repeats: int, cases: dict[str, Callable[[], Any]]
) -> dict[str, tuple[float, Any, float]]:
    """Median wall seconds, last result and median CPU seconds of this process (what one
    core gave it, whatever else the machine runs) of each case, taking turns each repeat."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    results: dict[str, Any] = {}
    for _ in range(repeats):
        for name, work in cases.items():
            began, began_cpu = time.perf_counter(), time.process_time()
            results[name] = work()
            times[name].append(time.perf_counter() - began)
            cpu[name].append(time.process_time() - began_cpu)
    return {name: (median(times[name]), results[name], median(cpu[name])) for name in cases}


def best_fit(lengths: np.ndarray, capacity: int) -> SamplePlan:
    """The default's first stage alone: the whole-epoch best fit, without the refill."""
    return SamplePlan(*pack_by_levels(np.asarray(lengths, dtype=np.int64), capacity))


def same_plan(a: Any, b: Any) -> bool:
    return bool(np.array_equal(a.offsets, b.offsets) and np.array_equal(a.items, b.items))


def build_row(docs: int, seq_len: int, repeats: int, python_max: int) -> dict[str, Any]:
    bounds = document_bounds(docs)
    items_s, items = timed(repeats, lambda: document_items(bounds, seq_len, "split"))
    lengths = items.lengths.astype(np.int64)
    capacity = seq_len + 1
    runs = interleaved(
        repeats,
        {
            "sort": lambda: np.sort(lengths),
            "pack": lambda: pack_items(lengths, capacity),
            "best_fit": lambda: best_fit(lengths, capacity),
            "grouped": lambda: pack_items(lengths, capacity, GROUP_SIZE),
        },
    )
    pack_s, plan, pack_cpu = runs["pack"]
    row: dict[str, Any] = {
        "docs": docs,
        "items": lengths.size,
        "items_s": items_s,
        "pack_s": pack_s,
        "pack_cpu": pack_cpu,
        "items_per_s": lengths.size / pack_cpu,
        "sort_s": runs["sort"][2],
        "vs_sort": pack_cpu / runs["sort"][2],
        "grouped_s": runs["grouped"][0],
        "grouped_cpu": runs["grouped"][2],
        "vs_grouped": pack_cpu / runs["grouped"][2],
        "best_fit_cpu": runs["best_fit"][2],
        "refilled": runs["best_fit"][1].num_samples - plan.num_samples,
    }
    if lengths.size <= python_max:
        python_s, python = timed(1, lambda: _pack_in_python(lengths, capacity, lengths.size))
        row["python_s"] = python_s
        row["identical"] = same_plan(runs["best_fit"][1], python)
    return row


def padding_rows(
    docs: int, seq_len: int, args: argparse.Namespace, olmo: str | None
) -> list[dict[str, Any]]:
    bounds = document_bounds(docs)
    items = document_items(bounds, seq_len, "split")
    lengths, capacity = items.lengths.astype(np.int64), seq_len + 1
    tokens = int(lengths.sum())
    concat = (int(bounds[-1]) - 1) // seq_len
    cases: list[tuple[str, int, int, float]] = [  # (case, samples, sample tokens, seconds)
        ("concat (windows)", concat, capacity, float("nan")),
        ("padded", lengths.size, capacity, float("nan")),
    ]
    seconds, plan = timed(1, lambda: pack_items(lengths, capacity))
    cases.append(("packed, default (best fit + refill)", plan.num_samples, capacity, seconds))
    seconds, plan = timed(1, lambda: best_fit(lengths, capacity))
    cases.append(("packed, whole-epoch best fit alone", plan.num_samples, capacity, seconds))
    for group in args.group_sizes:
        seconds, plan = timed(1, lambda: pack_items(lengths, capacity, group))  # noqa: B023
        cases.append((f"packed, group_size {group}", plan.num_samples, capacity, seconds))
    for cap in args.caps:  # sampling.max_documents_per_sample
        seconds, plan = timed(1, lambda: pack_items(lengths, capacity, max_items=cap))  # noqa: B023
        cases.append((f"packed, at most {cap} documents", plan.num_samples, capacity, seconds))
    rows = [_padding_row(seq_len, docs, tokens, concat, *case) for case in cases]
    if olmo is not None:
        rows += olmo_rows(np.diff(bounds), seq_len, docs, concat, olmo)
    return rows


def olmo_rows(
    doc_sizes: np.ndarray, seq_len: int, docs: int, concat: int, python: str
) -> list[dict[str, Any]]:
    """OLMo-core's packer on its own pieces of the documents, and streamload's default over
    the same pieces and capacity (its sample count must be OLMo-core's)."""
    pieces = olmo_fragments(doc_sizes, seq_len)
    tokens = int(pieces.sum())
    found = olmo_pack(pieces, seq_len, python)
    seconds, plan = timed(1, lambda: best_fit(pieces, seq_len))
    same = plan.num_samples == found["instances"]
    refill_s, refilled = timed(1, lambda: pack_items(pieces, seq_len))
    return [
        _padding_row(
            seq_len, docs, tokens, concat, f"OLMo-core {found['version']} InstancePacker (OBFD)",
            found["instances"], seq_len, found["seconds"],
        ),
        _padding_row(
            seq_len, docs, tokens, concat,
            f"streamload best fit alone on OLMo-core's pieces (same count: {same})",
            plan.num_samples, seq_len, seconds,
        ),
        _padding_row(
            seq_len, docs, tokens, concat, "packed default on OLMo-core's pieces",
            refilled.num_samples, seq_len, refill_s,
        ),
    ]  # fmt: skip


def seed_rows(docs: int, seq_len: int, seeds: int, olmo: str) -> list[dict[str, Any]]:
    """Samples over the bound, streamload's default against OLMo-core's packer, on ``seeds``
    draws of the documents (one draw decides a few samples either way)."""
    rows = []
    for seed in range(seeds):
        sizes = np.diff(document_bounds(docs, seed))
        items = document_items(np.concatenate([[0], np.cumsum(sizes)]), seq_len, "split")
        ours = pack_items(items.lengths, seq_len + 1).num_samples
        alone = best_fit(items.lengths, seq_len + 1).num_samples
        ours_bound = -(-int(items.lengths.sum()) // (seq_len + 1))
        pieces = olmo_fragments(sizes, seq_len)
        theirs = olmo_pack(pieces, seq_len, olmo)["instances"]
        their_bound = -(-int(pieces.sum()) // seq_len)
        rows.append(
            {
                "seq_len": seq_len,
                "docs": docs,
                "seed": seed,
                "ours_over": ours - ours_bound,
                "ours_pct": 100 * (ours / ours_bound - 1),
                "alone_over": alone - ours_bound,
                "olmo_over": theirs - their_bound,
                "olmo_pct": 100 * (theirs / their_bound - 1),
            }
        )
    return rows


def _padding_row(
    seq_len: int,
    docs: int,
    tokens: int,
    concat: int,
    case: str,
    samples: int,
    width: int,
    seconds: float,
) -> dict[str, Any]:
    bound = -(-tokens // width)
    return {
        "seq_len": seq_len,
        "docs": docs,
        "case": case,
        "samples": samples,
        "bound": bound,
        "over_bound_pct": 100 * (samples / bound - 1),
        "vs_concat": samples / concat,
        "pad_pct": 0.0 if case.startswith("concat") else 100 * (1 - tokens / (samples * width)),
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    add_common_args(parser)
    parser.add_argument(
        "--docs", type=int_list, default=[100_000, 1_000_000, 10_000_000], help="build table"
    )
    parser.add_argument(
        "--seq-lens", type=int_list, default=[2048, 8192], help="padding table ('': none)"
    )
    parser.add_argument("--padding-docs", type=int_list, default=[200_000, 1_000_000])
    parser.add_argument("--group-sizes", type=int_list, default=[1024, GROUP_SIZE, 16384])
    parser.add_argument(
        "--python-max", type=int, default=20_000_000, help="most items for the Python loop"
    )
    parser.add_argument(
        "--caps", type=int_list, default=[], help="max_documents_per_sample values to pack with"
    )
    parser.add_argument("--olmo-python", default=None, help="a Python with ai2-olmo-core")
    parser.add_argument(
        "--seeds", type=int, default=0, help="document draws of the OLMo-core sweep (0: none)"
    )
    parser.add_argument("--seed-docs", type=int, default=200_000, help="documents per draw")
    args = parser.parse_args()
    if args.docs:
        emit_build(
            args, [build_row(n, args.seq_len, args.repeats, args.python_max) for n in args.docs]
        )
    olmo = olmo_python(args.olmo_python) if args.seq_lens else None
    if args.seq_lens and args.padding_docs:
        rows = [
            row
            for docs in args.padding_docs
            for seq_len in args.seq_lens
            for row in padding_rows(docs, seq_len, args, olmo)
        ]
        emit_padding(args, rows, olmo)
    if args.seq_lens and args.seeds and olmo is not None:
        sweep = [
            row
            for seq_len in args.seq_lens
            for row in seed_rows(args.seed_docs, seq_len, args.seeds, olmo)
        ]
        emit_seeds(args, sweep)


def emit_build(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """Print and record the build table."""
    emit(
        args,
        f"Packing plan build: whole-epoch best fit decreasing (seq_len {args.seq_len})",
        rows,
        [
            ("docs", "documents", ",d"),
            ("items", "items", ",d"),
            ("items_s", "document_items s", ".3f"),
            ("pack_s", "default s", ".3f"),
            ("pack_cpu", "default CPU s", ".3f"),
            ("items_per_s", "items / CPU s", ",.0f"),
            ("sort_s", "np.sort CPU s", ".3f"),
            ("vs_sort", "default / sort (CPU)", ".1f"),
            ("grouped_s", f"group_size {GROUP_SIZE} s", ".3f"),
            ("grouped_cpu", f"group_size {GROUP_SIZE} CPU s", ".3f"),
            ("vs_grouped", "default / grouped (CPU)", ".2f"),
            ("best_fit_cpu", "best fit alone CPU s", ".3f"),
            ("refilled", "samples the refill saved", "d"),
            ("python_s", "per-item loop s", ".3f"),
            ("identical", "identical", ""),
        ],
        notes=[
            f"Medians of {args.repeats} interleaved repeats in one process (np.sort, the"
            f" default pack_items, the best fit alone, pack_items with group_size {GROUP_SIZE},"
            " taking turns);"
            " split long documents; one thread. s: wall seconds; CPU s: the process's CPU"
            " seconds (time.process_time: what one core gave it, the honest figure on a"
            " shared machine); ratios are of CPU seconds. The default is one best fit"
            " decreasing over the whole epoch in steps per (item size, free space), then the"
            " refill of the bins it left with free space (samples the refill saved: best fit"
            " alone minus the default); np.sort: of the same"
            " item lengths, the sort every best fit decreasing starts with; per-item loop:"
            " the same whole-epoch best fit one item at a time (timed once, up to"
            f" {args.python_max:,} items); identical = its plan equals the best fit alone's,"
            " sample for sample.",
        ],
    )


def emit_padding(args: argparse.Namespace, padding: list[dict[str, Any]], olmo: str | None) -> None:
    """Print and record the padding table."""
    emit(
        args,
        "Packing: samples against the bound, streamload and OLMo-core on the same documents",
        padding,
        [
            ("seq_len", "seq_len", "d"),
            ("docs", "documents", ",d"),
            ("case", "case", ""),
            ("samples", "samples", ",d"),
            ("bound", "bound", ",d"),
            ("over_bound_pct", "% over bound", ".4f"),
            ("vs_concat", "samples / concat", ".4f"),
            ("pad_pct", "padding %", ".4f"),
            ("seconds", "s", ".2f"),
        ],
        notes=[
            "streamload rows: items of at most seq_len + 1 tokens (split documents: pieces"
            " of a long document share one token, as concat windows do), samples of seq_len"
            " + 1 tokens, bound ceil(tokens / (seq_len + 1)); concat = (document tokens - 1)"
            " // seq_len windows, no padding but documents cut at window edges; padding % ="
            " pad tokens / sample tokens.",
            "OLMo-core rows: the same documents under OLMo-core's rules (pieces of seq_len"
            " tokens, LongDocStrategy.fragment; instances of seq_len tokens), bound"
            " ceil(tokens / seq_len); its seconds are the packer alone, in "
            + (olmo or "(not installed: no OLMo-core rows)")
            + ". The next row packs OLMo-core's pieces into seq_len tokens with streamload's"
            " best fit alone: equal sizes are interchangeable, so best fit decreasing must"
            " give the same count whatever the ties; the row after, with the default (best"
            " fit + refill).",
        ],
    )


def emit_seeds(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """Print and record the sweep over document draws."""
    ours = {s: [r["ours_pct"] for r in rows if r["seq_len"] == s] for s in args.seq_lens}
    theirs = {s: [r["olmo_pct"] for r in rows if r["seq_len"] == s] for s in args.seq_lens}
    emit(
        args,
        "Packing: samples over the bound on several draws, streamload default vs OLMo-core",
        rows,
        [
            ("seq_len", "seq_len", "d"),
            ("docs", "documents", ",d"),
            ("seed", "draw", "d"),
            ("ours_over", "streamload samples over", "d"),
            ("ours_pct", "streamload % over", ".4f"),
            ("alone_over", "best fit alone over", "d"),
            ("olmo_over", "OLMo-core samples over", "d"),
            ("olmo_pct", "OLMo-core % over", ".4f"),
        ],
        notes=[
            "Each draw: document_bounds(docs, seed); streamload's default over its items"
            " (capacity seq_len + 1) and OLMo-core's InstancePacker over its pieces"
            " (capacity seq_len), each against its own bound. Means of % over: "
            + "; ".join(
                f"seq_len {s}: streamload {np.mean(ours[s]):.4f}, OLMo-core"
                f" {np.mean(theirs[s]):.4f}"
                for s in args.seq_lens
            )
            + ".",
        ],
    )


if __name__ == "__main__":
    main()
