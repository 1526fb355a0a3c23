"""Packed (and padded) mode's start-up: first batch with a cold and a warm plan cache, and a
far resume, beside megatron-core's index build over the same documents, one run.

The data (``--format``) is a Megatron dataset of ``--docs`` log-normal documents (median 500
tokens, the lengths of ``megatron.py``): its ``.idx`` is written whole and its ``.bin`` is a
sparse file of the right size (zeros; no tokens are written, and only the first batch's pages
are read), so 10^7 documents (8·10^9 tokens) fit any disk; or a Dolma folder of the same
documents, ``--docs-per-shard`` per ``part-0-NNNNN.npy`` (sparse) + ``.csv.gz`` (rows
``start,end,id,src,loc`` as dolma writes them: a 40-hex id, an S3 source path, the line;
about 160 bytes a row, gzip level 6), kept in ``--data-dir`` for the next run. Each row is a
fresh interpreter, timed from after ``from streamload import build_loader`` (which imports
torch), in wall seconds and in the process's CPU seconds:

* **cold**: ``build_loader`` (describe, read the document index, cut items, pack, write and
  map the plan) + the first batch, with an empty ``sampling.cache_dir`` and an empty
  ``storage.cache_dir`` (no catalog, no Dolma bounds kept from an earlier run);
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
    python benchmarks/packing_startup.py --docs 10000000 --no-megatron --group-sizes 4096
    python benchmarks/packing_startup.py --format dolma --modes packed,padded --no-megatron
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from _common import add_common_args, emit, int_list, median, run_child, str_list
from megatron import lengths_of, megatron_core_build

CHILD = r"""
import json, resource, sys, time
from streamload import build_loader  # imports torch: not part of the start-up timed below
cfg, mode, state_path = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
began, cpu = time.perf_counter(), time.process_time()
loader = build_loader(cfg, batch_size=8)
if mode == "resume":
    with open(state_path) as fh:
        loader.load_state_dict(json.load(fh))
next(iter(loader))
seconds, cpu_s = time.perf_counter() - began, time.process_time() - cpu
plan = loader.stream.sources[0].plan
if mode == "warm":  # a state near the end of the epoch, for the resume row
    sys.path.insert(0, sys.argv[4])
    from resume import state_at
    with open(state_path, "w") as fh:
        json.dump(state_at(loader, (plan.num_samples - 1000) // 8 * 8), fh)
rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "cpu_s": cpu_s, "rss_mib": rss_mib,
                  "items": plan.num_items, "samples": plan.num_samples,
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


DOLMA_SOURCE = (
    "s3://ai2-llm/pretraining-data/sources/cc_en_head/v1/documents/train/part-{:04d}.json.gz"
)


def write_dolma(folder: Path, docs: int, per_shard: int) -> tuple[Path, np.ndarray]:
    """A Dolma folder of ``docs`` documents (the lengths of :func:`write_dataset`), written
    once into ``folder/dolma-DOCS-PER`` (renamed into place when complete) and reused."""
    lengths = lengths_of(docs)
    data = folder / f"dolma-{docs}-{per_shard}"
    if data.is_dir():
        return data, lengths
    tmp = folder / f".{data.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for part, first in enumerate(range(0, docs, per_shard)):
        ends = np.cumsum(lengths[first : first + per_shard], dtype=np.int64)
        starts = ends - lengths[first : first + per_shard]
        ids = np.random.default_rng(part).bytes(20 * ends.size).hex()
        src = DOLMA_SOURCE.format(part)
        text = "".join(
            f"{s},{e},{ids[40 * i : 40 * i + 40]},{src},{i + 1}\r\n"
            for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True))
        )
        stem = tmp / f"part-0-{part:05d}"
        with open(f"{stem}.csv.gz", "wb") as fh:
            fh.write(gzip.compress(text.encode(), compresslevel=6, mtime=0))
        with open(f"{stem}.npy", "wb") as fh:
            fh.truncate(int(ends[-1]) * 2)  # uint16 tokens, sparse
    tmp.rename(data)
    return data, lengths


def source_config(data: Path, fmt: str) -> dict[str, Any]:
    if fmt == "dolma":
        return {"name": "bench", "path": str(data), "format": "dolma", "dtype": "uint16"}
    return {"name": "bench", "path": str(data)}


def loader_rows(
    folder: Path, data: Path, args: argparse.Namespace, mode: str, group: int | None = None
) -> list[dict[str, Any]]:
    label = mode if group is None else f"{mode}, group_size {group}"
    cache, storage = folder / f"plans-{mode}-{group}", folder / f"storage-{mode}-{group}"
    for stale in (cache, storage):  # the cold row starts with every cache empty
        shutil.rmtree(stale, ignore_errors=True)
    cfg = {
        "seq_len": args.seq_len,
        "pad_token_id": 1,
        "sources": [source_config(data, args.format)],
        "sampling": {"mode": mode, "cache_dir": str(cache)}
        | ({} if group is None else {"group_size": group}),
        "storage": {"cache_dir": str(storage)},
        "packing": {"masks": True},
    }
    state = folder / "state.json"
    here = str(Path(__file__).resolve().parent)
    rows = []
    for case in ("cold", "warm", "resume"):
        child = run_child(["-c", CHILD, json.dumps(cfg), case, str(state), here], timeout=1800)
        assert child.result is not None
        result = child.result
        rows.append({"format": args.format, "mode": label, "case": case, "docs": args.docs,
                     "items": result["items"], "samples": result["samples"],
                     "first_batch_s": result["seconds"], "cpu_s": result.get("cpu_s"),
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
    parser.add_argument("--format", choices=("megatron", "dolma"), default="megatron")
    parser.add_argument("--docs-per-shard", type=int, default=500_000, help="dolma only")
    parser.add_argument("--modes", type=str_list, default=["packed"], help="packed,padded")
    parser.add_argument("--megatron-path", default="/tmp/mcore", help="megatron-core install")
    parser.add_argument("--megatron", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument(
        "--group-sizes", type=int_list, default=[], help="packed also with these group_size"
    )
    args = parser.parse_args()
    data_dir = args.data_dir if os.path.isdir(args.data_dir) else None
    with tempfile.TemporaryDirectory(dir=data_dir) as tmp:
        folder = Path(tmp)
        if args.format == "dolma":
            data, lengths = write_dolma(Path(args.data_dir), args.docs, args.docs_per_shard)
        else:
            data, lengths = write_dataset(folder, args.docs)
        rows = []
        for _ in range(args.repeats):  # a fresh cache each repeat: the cold row builds
            variants = [
                (mode, group)
                for mode in args.modes
                for group in [None, *(args.group_sizes if mode == "packed" else [])]
            ]
            rows.append([row for v in variants for row in loader_rows(folder, data, args, *v)])
        keys = ("first_batch_s", "cpu_s", "process_s", "rss_mib")
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
        f"({args.format}, seq_len {args.seq_len})",
        table,
        [
            ("format", "format", ""),
            ("mode", "mode", ""),
            ("case", "case", ""),
            ("docs", "documents", ",d"),
            ("items", "items", ",d"),
            ("samples", "samples", ",d"),
            ("first_batch_s", "build_loader + first batch s", ".3f"),
            ("cpu_s", "its CPU s", ".3f"),
            ("process_s", "whole process s", ".2f"),
            ("rss_mib", "peak RSS MiB", ".0f"),
            ("plan_bytes_per_item", "plan bytes / item", ".1f"),
            ("mapped", "plan mapped", ""),
        ],
        notes=[
            "Fresh interpreter per row, timed after `from streamload import build_loader` "
            "(whole process: with interpreter start and imports, torch's included); its CPU s: "
            "the child's process_time over the same span; batch 8, masks on; median of the "
            "repeats, each with empty plan and storage caches for its cold row. "
            "resume: load_state_dict of a state near the end of the epoch + first batch. "
            "megatron-core: GPTDataset's document, sample and shuffle index build for one "
            "epoch of the same lengths (its s column: the build alone, median of the repeats, "
            "without reading the lengths or writing files).",
        ],
    )


if __name__ == "__main__":
    main()
