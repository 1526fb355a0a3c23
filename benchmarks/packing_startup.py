"""Packed mode's start-up: first batch with a cold and a warm plan cache, and a far resume,
beside megatron-core's index build over the same documents, one run.

The data is a Megatron dataset of ``--docs`` log-normal documents (median 500 tokens, the
lengths of ``megatron.py``): its ``.idx`` is written whole and its ``.bin`` is a sparse file
of the right size (zeros; no tokens are written, and only the first batch's pages are read),
so 10^7 documents (8·10^9 tokens) fit any disk. Each row is a fresh interpreter, timed from
after ``from streamload import build_loader`` (which imports torch):

* **cold**: ``build_loader`` (describe, read the document index, cut items, pack, write and
  map the plan) + the first batch, with an empty ``sampling.cache_dir``;
* **warm**: the same with the plan the cold row wrote (mapped, no document is looked at);
* **resume**: a fresh loader's ``load_state_dict`` of a state near the end of the epoch +
  its first batch (warm cache);
* **megatron-core**: ``GPTDataset``'s index build for one epoch of the same sequence
  lengths (its own functions and C++ helper, in a subprocess: ``megatron.py``), the one-time
  work the packing plan stands beside.

The peak resident memory of each child (``ru_maxrss``) and the plan's bytes per item are
reported. Needs megatron-core installed aside (``--megatron-path``, see ``megatron.py``);
``--no-megatron`` skips that row.

    python benchmarks/packing_startup.py --docs 10000000
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from _common import add_common_args, emit, median, run_child
from megatron import lengths_of, megatron_core_build

CHILD = r"""
import json, resource, sys, time
from streamload import build_loader  # imports torch: not part of the start-up timed below
cfg, mode, state_path = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
began = time.perf_counter()
loader = build_loader(cfg, batch_size=8)
if mode == "resume":
    with open(state_path) as fh:
        loader.load_state_dict(json.load(fh))
next(iter(loader))
seconds = time.perf_counter() - began
plan = loader.stream.sources[0].plan
if mode == "warm":  # a state near the end of the epoch, for the resume row
    sys.path.insert(0, sys.argv[4])
    from resume import state_at
    with open(state_path, "w") as fh:
        json.dump(state_at(loader, (plan.num_samples - 1000) // 8 * 8), fh)
print(json.dumps({"seconds": seconds, "rss_mib": resource.getrusage(resource.RUSAGE_SELF)
                  .ru_maxrss / 1024, "items": plan.num_items, "samples": plan.num_samples,
                  "mapped": plan.files is not None}))
"""


def write_dataset(folder: Path, docs: int) -> tuple[Path, np.ndarray]:
    """A Megatron dataset of ``docs`` documents: a real ``.idx``, a sparse ``.bin``."""
    from streamload.formats.megatron._index import write_index

    lengths = lengths_of(docs)
    (folder / "data").mkdir()  # alone: a file written beside the shards re-keys their catalog
    prefix = folder / "data" / "bench_text_document"
    dtype = np.dtype(np.uint16)
    write_index(f"{prefix}.idx", dtype, lengths, np.arange(docs + 1), None)
    with open(f"{prefix}.bin", "wb") as fh:
        fh.truncate(int(lengths.sum(dtype=np.int64)) * dtype.itemsize)
    return Path(f"{prefix}.bin"), lengths


def loader_rows(folder: Path, data: Path, docs: int, seq_len: int) -> list[dict[str, Any]]:
    cache = folder / "plans"
    cfg = {
        "seq_len": seq_len,
        "pad_token_id": 1,
        "sources": [{"name": "bench", "path": str(data)}],
        "sampling": {"mode": "packed", "cache_dir": str(cache)},
        "packing": {"masks": True},
    }
    state = folder / "state.json"
    here = str(Path(__file__).resolve().parent)
    rows = []
    for mode in ("cold", "warm", "resume"):
        child = run_child(["-c", CHILD, json.dumps(cfg), mode, str(state), here], timeout=1800)
        assert child.result is not None
        result = child.result
        rows.append({"case": mode, "docs": docs, "items": result["items"],
                     "samples": result["samples"], "first_batch_s": result["seconds"],
                     "process_s": child.seconds, "rss_mib": result["rss_mib"],
                     "mapped": result["mapped"]})  # fmt: skip
    plan_bytes = sum(p.stat().st_size for p in cache.glob("*.npy"))
    for row in rows:
        row["plan_bytes_per_item"] = plan_bytes / row["items"]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    add_common_args(parser)
    parser.add_argument("--docs", type=int, default=10_000_000)
    parser.add_argument("--megatron-path", default="/tmp/mcore", help="megatron-core install")
    parser.add_argument("--megatron", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    data_dir = args.data_dir if os.path.isdir(args.data_dir) else None
    with tempfile.TemporaryDirectory(dir=data_dir) as tmp:
        folder = Path(tmp)
        data, lengths = write_dataset(folder, args.docs)
        rows = []
        for _ in range(args.repeats):  # a fresh cache each repeat: the cold row builds
            for stale in (folder / "plans").glob("*"):
                stale.unlink()
            rows.append(loader_rows(folder, data, args.docs, args.seq_len))
        keys = ("first_batch_s", "process_s", "rss_mib")
        table = [
            runs[0] | {key: median(r[key] for r in runs) for key in keys}
            for runs in zip(*rows, strict=True)
        ]
        if args.megatron:
            np.save(folder / "lengths.npy", lengths)
            epoch = (int(lengths.sum(dtype=np.int64)) - 1) // args.seq_len
            built = megatron_core_build(
                folder / "lengths.npy", epoch, args.seq_len, args.repeats, args.megatron_path
            )
            table.append({"case": "megatron-core index build (1 epoch)", "docs": args.docs,
                          "samples": epoch, "first_batch_s": built["seconds"]})  # fmt: skip
    emit_table(args, table)


def emit_table(args: argparse.Namespace, table: list[dict[str, Any]]) -> None:
    emit(
        args,
        f"Packed mode start-up: cold and warm plan cache, resume, beside megatron-core "
        f"(seq_len {args.seq_len})",
        table,
        [
            ("case", "case", ""),
            ("docs", "documents", ",d"),
            ("items", "items", ",d"),
            ("samples", "samples", ",d"),
            ("first_batch_s", "build_loader + first batch s", ".3f"),
            ("process_s", "whole process s", ".2f"),
            ("rss_mib", "peak RSS MiB", ".0f"),
            ("plan_bytes_per_item", "plan bytes / item", ".1f"),
            ("mapped", "plan mapped", ""),
        ],
        notes=[
            "Fresh interpreter per row, timed after `from streamload import build_loader` "
            "(whole process: with interpreter start and imports, torch's included); batch 8, "
            "masks on; median of the repeats, each with an empty cache for its cold row. "
            "resume: load_state_dict of a state near the end of the epoch + first batch. "
            "megatron-core: GPTDataset's document, sample and shuffle index build for one "
            "epoch of the same lengths (its s column: the build alone, median of the repeats, "
            "without reading the lengths or writing files).",
        ],
    )


if __name__ == "__main__":
    main()
