"""Fresh memory per chunk vs reused blocks (``streamload.nodes._blocks``), in one process.

What a chunk's outputs cost when every chunk gets fresh arrays (``astype`` and
``packing_fields`` allocating, the loader before issue 35) against the same arrays carved
from a :class:`~streamload.nodes._blocks.BlockPool` (the loader now), masks off and on, on the
same token blocks (``seq_len`` 2048, documents of ~500 tokens ending in EOS), cycling over
more chunks than the caches hold and keeping the previous chunk alive while the next one is
built, as the loader's batch split does. Each measurement runs in a new process doing only
that (as a training process whose loader is its main allocator): whether fresh memory
faults depends on the process's allocation history (glibc hands freed memory above its trim
threshold back to the kernel, and a later allocation faults it in again, a page fault and
the kernel's zeroing per 4 KiB page); reused blocks never need new pages. Variants run
round-robin, one process each; medians.

    python benchmarks/chunk_blocks.py --repeats 10
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

import numpy as np
from _common import Column, add_common_args, emit, median

from streamload.nodes._blocks import BlockCarver, BlockPool
from streamload.ops.masks import field_shapes, packing_fields, starts_from_eos

INT64 = np.dtype(np.int64)


def make_chunks(count: int, rows: int, length: int) -> list[np.ndarray]:
    """``count`` uint32 token blocks ``[rows, length + 1]`` with EOS (0) ending documents."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        tokens = rng.integers(1, 128_256, (rows, length + 1)).astype(np.uint32)
        flat = tokens.reshape(-1)
        ends = np.cumsum(np.maximum(1, rng.lognormal(np.log(500), 1.0, flat.size // 100)))
        flat[ends[ends < flat.size].astype(np.int64)] = 0
        out.append(tokens)
    return out


def fresh(tokens: np.ndarray, masks: bool, pool: BlockPool) -> dict[str, np.ndarray]:
    """A chunk in new arrays."""
    out = {"input_ids": tokens[:, :-1].astype(np.int64), "labels": tokens[:, 1:].astype(np.int64)}
    if masks:
        out.update(packing_fields(starts_from_eos(tokens, 0), out["labels"]))
    return out


def pooled(tokens: np.ndarray, masks: bool, pool: BlockPool) -> dict[str, np.ndarray]:
    """The same chunk carved from a reused block."""
    rows, width = tokens.shape
    pair = (INT64, (rows, width - 1))
    fields = field_shapes(rows, width - 1, INT64, True) if masks else {}
    carver = BlockCarver(pool, [pair, pair, *fields.values()])
    out = {"input_ids": carver.array(*pair), "labels": carver.array(*pair)}
    np.copyto(out["input_ids"], tokens[:, :-1], casting="unsafe")
    np.copyto(out["labels"], tokens[:, 1:], casting="unsafe")
    if masks:
        given = {key: carver.array(*shape) for key, shape in fields.items()}
        out.update(packing_fields(starts_from_eos(tokens, 0), out["labels"], out=given))
    return out


def measure(build: Any, chunks: list[np.ndarray], masks: bool) -> tuple[float, float]:
    """ms and minor page faults per chunk over one cycle of ``chunks``."""
    pool = BlockPool()
    held = build(chunks[-1], masks, pool)  # the chunk being split while the next is built
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    for tokens in chunks:
        held = build(tokens, masks, pool)
    elapsed = time.perf_counter() - start
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    del held
    return elapsed / len(chunks) * 1e3, faults / len(chunks)


COLUMNS: list[Column] = [
    ("memory", "chunk memory", ""),
    ("masks", "masks", ""),
    ("ms", "ms / chunk (median)", ".2f"),
    ("range", "min-max", ""),
    ("faults", "page faults / chunk", ".0f"),
    ("ratio", "fresh / reused", ".2f"),
]


def child(args: argparse.Namespace) -> None:
    """One measurement in this process: print ``[ms, faults]`` per chunk as JSON."""
    chunks = make_chunks(args.chunks, args.rows, args.seq_len)
    build = {"fresh": fresh, "reused": pooled}[args.child]
    measure(build, chunks, args.masks)  # a first cycle: the process's steady state
    print(json.dumps(measure(build, chunks, args.masks)))


def run_child(args: argparse.Namespace, name: str, masks: bool) -> tuple[float, float]:
    """One measurement in a new process."""
    command = [sys.executable, __file__, "--child", name, "--rows", str(args.rows)]
    command += ["--chunks", str(args.chunks), "--seq-len", str(args.seq_len)]
    command += ["--masks"] if masks else []
    result = subprocess.run(command, check=True, capture_output=True, text=True)
    ms, faults = json.loads(result.stdout)
    return ms, faults


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--rows", type=int, default=224, help="rows per chunk (28 batches of 8)")
    parser.add_argument("--chunks", type=int, default=12, help="distinct chunks cycled")
    parser.add_argument("--child", choices=["fresh", "reused"], help=argparse.SUPPRESS)
    parser.add_argument("--masks", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    variants = [(name, masks) for masks in (False, True) for name in ("fresh", "reused")]
    times: dict[tuple[str, bool], list[float]] = {v: [] for v in variants}
    faults: dict[tuple[str, bool], list[float]] = {v: [] for v in variants}
    for _ in range(max(1, args.repeats)):
        for name, masks in variants:
            ms, fault = run_child(args, name, masks)
            times[name, masks].append(ms)
            faults[name, masks].append(fault)
    rows = []
    for (name, masks), values in times.items():
        reused = median(times["reused", masks])
        rows.append(
            {
                "memory": name,
                "masks": "on" if masks else "off",
                "ms": median(values),
                "range": f"{min(values):.2f}-{max(values):.2f}",
                "faults": median(faults[name, masks]),
                "ratio": median(values) / reused if name == "fresh" else None,
            }
        )
    notes = [
        f"Chunks of {args.rows} rows x {args.seq_len + 1} uint32 tokens, {args.chunks} distinct "
        "ones cycled (one cycle unmeasured, one measured), the previous chunk held while the "
        "next is built; int64 input_ids and labels, with masks int64 doc_ids/position_ids, "
        "int32 cu_seqlens/max_seqlen.",
        f"Median of {args.repeats} round-robin repeats, each measurement in a new process; "
        "fresh / reused = median / median, same run.",
    ]
    emit(args, "Chunk memory: fresh arrays vs reused blocks", rows, COLUMNS, notes)


if __name__ == "__main__":
    main()
