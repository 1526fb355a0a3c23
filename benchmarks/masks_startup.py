"""Concat mode with packing masks: time to the first batch over Dolma corpora of 10^6-10^7
documents, with every cache already built ("warm") and with none ("cold").

The corpus is ``--docs`` log-normal documents (median 500 tokens, the lengths of
``megatron.py``) in Dolma shards of ``--docs-per-shard`` documents: a real ``.csv.gz`` per
shard (``start,end,id,src,loc`` rows, as ``dolma tokens`` writes them) and a sparse headerless
``.npy`` of the right size (zeros: no tokens are written, only the first batch's pages are
read), so 10^7 documents (8·10^9 tokens) fit any disk. Each row is a fresh interpreter:

* **cold**: empty ``storage.cache_dir`` (shard descriptions, document bounds, everything);
* **warm**: the caches the cold run wrote (the median of ``--repeats`` runs).

Timed from after ``from streamload import build_loader`` (torch's import is not start-up).

Shuffled windows, so the first batch's rows lie in up to ``--batch-size`` shards. Compare two
trees with ``before_after.py`` (``--key docs,case``).

Example:
    python benchmarks/masks_startup.py --docs 1e6,1e7 --repeats 3
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _common import add_common_args, emit, median, parse_sizes, run_child

CHILD = r"""
import json, resource, sys, time
from streamload import build_loader  # imports torch: not part of the start-up timed below
cfg = json.loads(sys.argv[1])
began = time.perf_counter()
loader = build_loader(cfg, batch_size=cfg.pop("_batch_size"))
batch = next(iter(loader))
seconds = time.perf_counter() - began
assert "cu_seqlens" in batch
print(json.dumps({"seconds": seconds, "cpu_s": time.process_time(),
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def lengths_of(count: int) -> np.ndarray:
    """``count`` log-normal document lengths, median 500 (seeded by the count)."""
    rng = np.random.default_rng(count)
    return np.maximum(1, rng.lognormal(np.log(500), 1.0, count)).astype(np.int64)


def _write_shard(path: Path, lengths: np.ndarray, first_id: int) -> None:
    ends = np.cumsum(lengths)
    starts = ends - lengths
    ids = np.arange(first_id, first_id + lengths.size)
    rows = "".join(
        f"{s},{e},doc-{i},s3://bucket/raw/part-{i // 100_000:05d}.json.gz,{i % 100_000}\r\n"
        for s, e, i in zip(starts.tolist(), ends.tolist(), ids.tolist(), strict=True)
    )
    with gzip.open(path.with_suffix(".csv.gz.tmp"), "wb", compresslevel=1) as fh:
        fh.write(rows.encode())
    path.with_suffix(".csv.gz.tmp").rename(path.with_suffix(".csv.gz"))
    with open(path, "wb") as fh:
        fh.truncate(int(ends[-1]) * 4)  # sparse uint32 tokens


def ensure_corpus(data_dir: str, docs: int, per_shard: int) -> Path:
    """The folder of a Dolma corpus of ``docs`` documents (written once, reused)."""
    folder = Path(data_dir) / f"dolma-docs{docs}-per{per_shard}"
    done = folder / "data" / ".complete"
    if done.exists():
        return folder / "data"
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "data").mkdir(parents=True)
    began = time.perf_counter()
    lengths = lengths_of(docs)
    for index, lo in enumerate(range(0, docs, per_shard)):
        part = lengths[lo : lo + per_shard]
        _write_shard(folder / "data" / f"part-{index:05d}.npy", part, lo)
    done.touch()
    print(f"wrote {docs:,} documents in {time.perf_counter() - began:.0f} s", file=sys.stderr)
    return folder / "data"


def config(data: Path, cache: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Concat mode, shuffled, with packing masks, every cache under ``cache``."""
    return {
        "seq_len": args.seq_len,
        "seed": 1234,
        "sources": [{"name": "dolma", "path": str(data), "format": "dolma", "dtype": "uint32"}],
        "sampling": {"mode": "concat", "shuffle": True},
        "packing": {"masks": True},
        "storage": {"cache_dir": str(cache)},
        "_batch_size": args.batch_size,
    }


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """A cold then ``--repeats`` warm runs per corpus size."""
    rows = []
    for docs in args.docs:
        data = ensure_corpus(args.data_dir, docs, args.docs_per_shard)
        cache = data.parent / "cache"
        shutil.rmtree(cache, ignore_errors=True)
        cfg = json.dumps(config(data, cache, args))
        runs: dict[str, list[dict[str, Any]]] = {"cold": [], "warm": []}
        for case in ["cold"] + ["warm"] * args.repeats:
            child = run_child(["-c", CHILD, cfg], timeout=1800)
            assert child.result is not None
            runs[case].append({**child.result, "process_s": child.seconds})
            print(f"{docs:.0e} {case}: {child.result['seconds']:.3f} s", file=sys.stderr)
        for case, results in runs.items():
            row: dict[str, Any] = {"docs": docs, "case": case,
                                   "shards": -(-docs // args.docs_per_shard)}  # fmt: skip
            for key in ("seconds", "cpu_s", "process_s", "rss_mib"):
                row[key] = median(r[key] for r in results)
            rows.append(row)
    return rows


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    add_common_args(parser)
    parser.add_argument("--docs", type=parse_sizes, default=[10**6, 10**7])
    parser.add_argument("--docs-per-shard", type=int, default=250_000)
    parser.add_argument("--batch-size", type=int, default=8)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    rows = measure(args)
    notes = [
        f"Median of {args.repeats} fresh processes per warm row, one cold run; batch size "
        f"{args.batch_size}, seq_len {args.seq_len}, concat mode, shuffle on, packing masks on.",
        "seconds = build_loader + first next(), timed inside the child after `from "
        "streamload import build_loader` (torch's import); cpu = the child's CPU time "
        "including imports.",
    ]
    columns = [
        ("docs", "documents", ",d"),
        ("shards", "shards", "d"),
        ("case", "case", ""),
        ("seconds", "to first batch (s)", ".3f"),
        ("cpu_s", "child CPU (s)", ".2f"),
        ("process_s", "whole process (s)", ".2f"),
        ("rss_mib", "peak RSS MiB", ".0f"),
    ]
    emit(args, "Concat + masks start-up over Dolma documents", rows, columns, notes)


if __name__ == "__main__":
    main()
