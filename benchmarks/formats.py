"""Convert, inspect and validate throughput per on-disk format.

The synthetic NPY corpus (EOS-delimited log-normal documents, 32-bit ids) is converted with
``streamload.tools.convert`` into each format, then, on a warm page cache:

* ``inspect``: describe the files (headers and indexes only) and read every document bound;
* ``validate``: ``inspect`` plus one streaming pass over all tokens (id range, EOS count,
  zero tail), reported in GB/s of token bytes (target >= 1 GB/s);
* ``raw max``: ``numpy.max`` over the same token bytes through ``numpy.memmap`` (one pass),
  the baseline the validate pass is compared with.

Example:
    python benchmarks/formats.py --tokens 1e9
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import add_common_args, emit, ensure_corpus, median, parse_sizes, str_list

from streamload.catalog.sources import describe_source
from streamload.config import SourceConfig
from streamload.formats.registry import FORMATS, open_shard
from streamload.tools.convert import convert, default_destination, open_writer
from streamload.tools.documents import document_bounds, scan_tokens

OUTPUTS = {"megatron": "data", "modalities": "data.pbin", "dolma": "part-0-00000.npy",
           "datatrove": "data_00000_unshuffled.ds", "numpy": "shards"}  # fmt: skip


def _catalog(paths: list[str], dtype: str = "auto") -> Any:
    return describe_source(SourceConfig(name="bench", path=tuple(paths), dtype=dtype))


def write_format(fmt: str, source: list[str], folder: Path) -> tuple[str, float, int]:
    """Convert the NPY corpus into ``fmt``; return (output, seconds, tokens).

    The corpus vocabulary needs 32-bit ids: int32 for Megatron (its code for vocabularies of
    65500 and more), uint32 elsewhere.
    """
    folder.mkdir(parents=True, exist_ok=True)
    destination = default_destination(fmt, str(folder / OUTPUTS[fmt]))
    start = time.perf_counter()
    writer = open_writer(fmt, destination, np.dtype(np.int32 if fmt == "megatron" else np.uint32))
    stats = convert(_catalog(source), writer, eos_token_id=0)
    return destination, time.perf_counter() - start, stats.tokens


def inspect_seconds(path: str, dtype: str) -> tuple[float, int]:
    """Describe and read all document bounds; (seconds, documents)."""
    start = time.perf_counter()
    catalog = _catalog([path], dtype)
    documents = 0
    for info in catalog.shards:
        bounds = open_shard(info).document_bounds()
        documents += 0 if bounds is None else len(bounds) - 1
    return time.perf_counter() - start, documents


def validate_seconds(path: str, dtype: str) -> tuple[float, int]:
    """Describe plus one pass over every token; (seconds, token bytes)."""
    start = time.perf_counter()
    catalog = _catalog([path], dtype)
    size = 0
    for info in catalog.shards:
        shard = open_shard(info)
        scan_tokens(shard, eos_token_id=0)
        document_bounds(shard)
        size += info.num_tokens * np.dtype(info.dtype).itemsize
    return time.perf_counter() - start, size


def raw_max_seconds(path: str, dtype: str) -> float:
    """``numpy.max`` over the token bytes of every shard, through numpy.memmap."""
    start = time.perf_counter()
    for info in _catalog([path], dtype).shards:
        array = np.memmap(info.path, dtype=np.dtype(info.dtype), mode="r", offset=info.offset,
                          shape=(info.num_tokens,))  # fmt: skip
        int(array.max())
    return time.perf_counter() - start


def measure(fmt: str, source: list[str], work: Path, repeats: int) -> dict[str, Any]:
    """One row: convert, inspect, validate and raw-max timings for one format."""
    shutil.rmtree(work / fmt, ignore_errors=True)
    path, write_s, tokens = write_format(fmt, source, work / fmt)
    dtype = "uint32" if fmt == "dolma" else "auto"
    validate_seconds(path, dtype)  # warm the page cache
    inspect_s, docs = zip(*(inspect_seconds(path, dtype) for _ in range(repeats)), strict=True)
    validate = [validate_seconds(path, dtype) for _ in range(repeats)]
    raw = median(raw_max_seconds(path, dtype) for _ in range(repeats))
    size = validate[0][1]
    valid_s = median(v[0] for v in validate)
    return {
        "format": fmt, "tokens": tokens, "documents": docs[0],
        "convert_mtok_s": tokens / write_s / 1e6, "inspect_s": median(inspect_s),
        "validate_s": valid_s, "validate_gb_s": size / valid_s / 1e9,
        "raw_max_gb_s": size / raw / 1e9, "ratio": raw / valid_s,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--tokens", type=parse_sizes, default=[10**9], help="corpus size, e.g. 1e9")
    parser.add_argument("--formats", type=str_list, default=list(OUTPUTS), help="formats to test")
    parser.add_argument("--work-dir", default="/tmp/streamload-bench-formats", help="outputs")
    args = parser.parse_args()
    source = ensure_corpus(args.data_dir, args.tokens[0], args.shard_tokens)
    wanted = [f for f in args.formats if f in FORMATS or f == "numpy"]
    rows = [measure(fmt, source, Path(args.work_dir), args.repeats) for fmt in wanted]
    columns = [
        ("format", "format", ""), ("tokens", "tokens", ".3g"), ("documents", "documents", ","),
        ("convert_mtok_s", "convert (M tokens/s)", ".1f"), ("inspect_s", "inspect (s)", ".3f"),
        ("validate_s", "validate (s)", ".2f"), ("validate_gb_s", "validate (GB/s)", ".2f"),
        ("raw_max_gb_s", "raw max (GB/s)", ".2f"), ("ratio", "validate / raw", ".2f"),
    ]  # fmt: skip
    notes = [
        "Source: the uint32 NPY benchmark corpus, converted into each format (int32 for "
        "Megatron, uint32 elsewhere; documents split at EOS 0); validate and inspect run on "
        "a warm page cache.",
        "validate = describe + one pass over all tokens (id range, EOS count, zero tail) + "
        "document bounds; raw max = one numpy.max pass over the same bytes.",
        f"Work folder {args.work_dir}; {os.cpu_count()} cores.",
    ]
    emit(args, f"Formats: convert, inspect, validate ({args.tokens[0]:.0e} tokens)", rows,
         columns, notes)  # fmt: skip


if __name__ == "__main__":
    main()
