"""Megatron index build: streamload's numpy build vs megatron-core's own, same data, one run.

For each document count the sequence lengths are log-normal (median 500 tokens); the request
gives E = 3 epochs with a separated last epoch. streamload builds the document, sample and
shuffle indices in this process (:func:`streamload.plan.megatron.build_gpt_indices`);
megatron-core builds them in a subprocess (``PYTHONPATH=/tmp/mcore``) with its own code
paths (``_build_document_index``, the C++ ``helpers.build_sample_idx``,
``_build_shuffle_index``), as ``GPTDataset`` does minus its file I/O. Both results are
hashed and must be identical. Then a real Megatron dataset is written and a loader's time to
its first batch is measured with a cold and a warm index cache (each in a fresh interpreter).

    python benchmarks/megatron.py --docs 100000,1000000,10000000 --megatron-path /tmp/mcore

megatron-core stays out of this interpreter: only the subprocess gets ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import add_common_args, emit, int_list, median, run_child

SEED = 1234
MEGATRON_CHILD = r"""
import hashlib, json, sys, time
import numpy as np
from megatron.core.datasets import helpers
from megatron.core.datasets.gpt_dataset import _build_document_index, _build_shuffle_index

def build():
    began = time.perf_counter()
    indices = np.arange(lengths.size, dtype=np.int32)
    tpe = int(lengths.sum()); extra = 1
    epochs = 1
    while epochs * tpe < num_samples * seq_len + extra:
        epochs += 1
    n_sans = ((epochs - 1) * tpe - extra) // seq_len
    n_per = (tpe - extra) // seq_len
    separate = epochs > 1 and num_samples - n_sans < int(0.80 * n_per)
    rng = np.random.RandomState(seed)
    doc = _build_document_index(indices, epochs, rng, separate)
    sample = helpers.build_sample_idx(lengths, doc, seq_len, epochs, tpe, True, extra)
    total = sample.shape[0] - 1
    shuffle = _build_shuffle_index(n_sans if separate else total, total, rng)
    return doc, sample, shuffle, epochs, time.perf_counter() - began

lengths = np.load(sys.argv[1]); num_samples, seq_len, seed, repeats = map(int, sys.argv[2:6])
times = []
for _ in range(repeats):
    doc, sample, shuffle, epochs, seconds = build()
    times.append(seconds)
digest = hashlib.sha256()
for a in (doc, sample, shuffle):
    digest.update(np.ascontiguousarray(a).tobytes())
print(json.dumps({"seconds": sorted(times)[len(times) // 2], "sha": digest.hexdigest(),
                  "epochs": epochs}))
"""
FIRST_BATCH_CHILD = r"""
import json, sys, time
from streamload import build_loader
began = time.perf_counter()
loader = build_loader(json.loads(sys.argv[1]), batch_size=8)
next(iter(loader))
print(json.dumps({"seconds": time.perf_counter() - began}))
"""


def lengths_of(count: int) -> np.ndarray:
    rng = np.random.default_rng(count)
    return np.maximum(1, rng.lognormal(np.log(500), 1.0, count)).astype(np.int32)


def e3_request(lengths: np.ndarray, seq_len: int) -> int:
    """num_samples giving E = 3 with a separated last epoch."""
    tpe = int(lengths.sum())
    return (2 * tpe - 1) // seq_len + ((tpe - 1) // seq_len) // 4


def build_row(
    count: int, seq_len: int, folder: Path, megatron_path: str, repeats: int
) -> dict[str, Any]:
    from streamload.plan.megatron import build_gpt_indices

    lengths = lengths_of(count)
    request = e3_request(lengths, seq_len)
    path = folder / f"lengths-{count}.npy"
    np.save(path, lengths)
    result = megatron_core_build(path, request, seq_len, repeats, megatron_path)
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        ours = build_gpt_indices(lengths, np.arange(count, dtype=np.int32), request, seq_len, SEED)
        times.append(time.perf_counter() - began)
    seconds = median(times)
    digest = hashlib.sha256()
    for array in ours:
        digest.update(np.ascontiguousarray(array).tobytes())
    return {
        "docs": count,
        "samples": int(ours.shuffle_index.size),
        "epochs": result["epochs"],
        "ours_s": seconds,
        "megatron_s": result["seconds"],
        "ratio": result["seconds"] / seconds,
        "index_mib": sum(a.nbytes for a in ours) / 2**20,
        "identical": digest.hexdigest() == result["sha"],
    }


def megatron_core_build(
    lengths: Path, num_samples: int, seq_len: int, repeats: int, megatron_path: str
) -> dict[str, Any]:
    """megatron-core's ``GPTDataset`` index build over the sequence lengths saved at
    ``lengths``, in a fresh interpreter with megatron-core on its path: ``seconds`` (median
    of ``repeats``), ``epochs`` and ``sha`` of the three arrays."""
    env = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = megatron_path
    try:
        argv = [str(lengths), str(num_samples), str(seq_len), str(SEED), str(repeats)]
        child = run_child(["-c", MEGATRON_CHILD, *argv], timeout=3600)
    finally:
        if env is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = env
    assert child.result is not None
    return child.result


def first_batch_rows(folder: Path, docs: int, seq_len: int) -> list[dict[str, Any]]:
    from streamload.formats.megatron.megatron import MegatronWriter

    lengths = lengths_of(docs)
    prefix = folder / "bench_text_document"
    rng = np.random.default_rng(0)
    with MegatronWriter(prefix, np.int32) as writer:
        for n in lengths.tolist():
            writer.add_document(rng.integers(1, 128_000, n, dtype=np.int32), lengths=[n])
    cfg = {
        "seq_len": seq_len,
        "seed": SEED,
        "sources": [{"name": "bench", "path": f"{prefix}.bin"}],
        "sampling": {
            "mode": "megatron",
            "num_samples": e3_request(lengths, seq_len),
            "cache_dir": str(folder / "cache"),
        },
    }
    rows = []
    for label in ("cold cache (build + write)", "warm cache (mmap)"):
        child = run_child(["-c", FIRST_BATCH_CHILD, json.dumps(cfg)])
        assert child.result is not None
        rows.append({"case": label, "docs": docs, "first_batch_s": child.result["seconds"],
                     "process_s": child.seconds})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    add_common_args(parser)
    parser.add_argument("--docs", type=int_list, default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--megatron-path", default="/tmp/mcore", help="megatron-core install")
    parser.add_argument("--first-batch-docs", type=int, default=100_000)
    parser.add_argument(
        "--build", action=argparse.BooleanOptionalAction, default=True, help="build-time rows"
    )
    args = parser.parse_args()
    data_dir = args.data_dir if os.path.isdir(args.data_dir) else None
    with tempfile.TemporaryDirectory(dir=data_dir) as tmp:
        folder = Path(tmp)
        if args.build:
            rows = [
                build_row(n, args.seq_len, folder, args.megatron_path, args.repeats)
                for n in args.docs
            ]
            emit_build(args, rows)
        first = first_batch_rows(folder, args.first_batch_docs, args.seq_len)
        emit(
            args,
            "Megatron mode: time to first batch, cold vs warm index cache",
            first,
            [
                ("case", "case", ""),
                ("docs", "documents", ",d"),
                ("first_batch_s", "build_loader + first batch s", ".3f"),
                ("process_s", "whole process s", ".3f"),
            ],
            notes=[
                "Fresh interpreter per row, timed after `import streamload` (the whole process"
                " column includes interpreter start and imports); batch 8; the warm row maps"
                " the files the cold row wrote."
            ],
        )


def emit_build(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """Print and record the build-time table."""
    emit(
        args,
        "Megatron index build: streamload vs megatron-core 0.16.1 (E = 3, separate last epoch)",
        rows,
        [
            ("docs", "documents", ",d"),
            ("samples", "samples", ",d"),
            ("epochs", "E", "d"),
            ("ours_s", "streamload s", ".3f"),
            ("megatron_s", "megatron-core s", ".3f"),
            ("ratio", "megatron / ours", ".2f"),
            ("index_mib", "index MiB", ".1f"),
            ("identical", "identical", ""),
        ],
        notes=[
            "Both build the same three arrays from the same lengths in one run; megatron-core"
            " runs in a subprocess with its own functions (C++ build_sample_idx); median of"
            f" {args.repeats} builds each, excluding imports and reading the lengths.",
            "index MiB: document + sample + shuffle index as built (what a cache maps).",
        ],
    )


if __name__ == "__main__":
    main()
