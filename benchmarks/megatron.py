"""Megatron index build: streamload's numpy build vs megatron-core's own, same data, one run.

For each document count the sequence lengths are log-normal (median 500 tokens); the request
gives E = 3 epochs with a separated last epoch. streamload builds the document, sample and
shuffle indices in this process (:func:`streamload.plan.megatron.build_gpt_indices`);
megatron-core builds them in a subprocess (``PYTHONPATH=/tmp/mcore``) with its own code
paths (``_build_document_index``, the C++ ``helpers.build_sample_idx``,
``_build_shuffle_index``), as ``GPTDataset`` does minus its file I/O. Both results are
hashed and must be identical. Then a real Megatron dataset is written and a loader's time to
its first batch is measured with a cold and a warm index cache (each in a fresh interpreter).

Warm start at scale (``--warm-docs``): a dataset of that many documents (a real ``.idx``, a
sparse ``.bin``: no token is written, so 10^7 documents fit any disk), the indices built once
by each side, then fresh interpreters interleaved (``--repeats`` rounds): megatron-core's
``BlendedMegatronDatasetBuilder`` over its cache (``path_to_cache``) + 8 samples collated;
streamload's ``build_loader`` + first batch of 8 over its own cache, and over megatron-core's;
with ``--baseline-tree`` also another streamload tree over the same cache. Each child times
from after its imports (torch and megatron-core or streamload) and reports its wall and CPU
time and its peak resident memory above the resident memory after the imports (the kernel's
peak counter is reset there: ``/proc/self/clear_refs``).

    python benchmarks/megatron.py --docs 100000,1000000,10000000 --megatron-path /tmp/mcore
    python benchmarks/megatron.py --no-build --no-first-batch --warm-docs 1000000,10000000

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
from _megatron_children import (
    FIRST_BATCH_CHILD,
    MEGATRON_CHILD,
    MEGATRON_WARM_CHILD,
    OURS_WARM_CHILD,
)

SEED = 1234


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
    argv = [str(lengths), str(num_samples), str(seq_len), str(SEED), str(repeats)]
    return _run(["-c", MEGATRON_CHILD, *argv], megatron_path)


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


WARM_SPLIT = "100,0,0"


def write_sparse_dataset(folder: Path, docs: int) -> tuple[str, np.ndarray]:
    """A Megatron dataset of ``docs`` documents: a real ``.idx``, a sparse ``.bin``
    (``benchmarks/packing_startup.py`` writes the same); returns its prefix and lengths."""
    from streamload.formats.megatron._index import write_index

    lengths = lengths_of(docs)
    data = folder / f"data-{docs}"
    data.mkdir()  # alone: a file written beside the shards re-keys their catalog
    prefix = data / "bench_text_document"
    dtype = np.dtype(np.uint16)
    write_index(f"{prefix}.idx", dtype, lengths, np.arange(docs + 1), None)
    with open(f"{prefix}.bin", "wb") as fh:
        fh.truncate(int(lengths.sum(dtype=np.int64)) * dtype.itemsize)
    return str(prefix), lengths


def warm_rows(
    folder: Path, docs: int, args: argparse.Namespace
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Cold rows (one build each) and warm rows (medians of interleaved repeats)."""
    prefix, lengths = write_sparse_dataset(folder, docs)
    request = e3_request(lengths, args.seq_len)

    def ours(cache: str, tree: str = "") -> list[str]:
        cfg = {"seq_len": args.seq_len, "seed": SEED,
               "sources": [{"name": "bench", "path": f"{prefix}.bin"}],
               "sampling": {"mode": "megatron", "split": WARM_SPLIT, "num_samples": request,
                            "cache_dir": cache}}  # fmt: skip
        return ["-c", OURS_WARM_CHILD, json.dumps(cfg), tree]

    ours_cache, core_cache = str(folder / f"ours-{docs}"), str(folder / f"core-{docs}")
    core = [prefix, core_cache, WARM_SPLIT, str(request), str(args.seq_len), str(SEED)]
    cases: dict[str, tuple[list[str], bool]] = {
        "megatron-core": (["-c", MEGATRON_WARM_CHILD, *core], True),
        "streamload": (ours(ours_cache), False),
        "streamload, megatron-core's cache": (ours(core_cache), False),
    }
    if args.baseline_tree:
        cases[f"streamload {args.baseline_tree}"] = (ours(ours_cache, args.baseline_tree), False)
    cold = []
    for label in ("megatron-core", "streamload", "streamload, megatron-core's cache"):
        argv, megatron = cases[label]  # builds the indices (or the sequence table) once
        child = _run(argv, args.megatron_path if megatron else None)
        cold.append({"case": f"{label}: cold", "docs": docs} | child)
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in cases}
    for _ in range(args.repeats):
        for label, (argv, megatron) in cases.items():
            runs[label].append(_run(argv, args.megatron_path if megatron else None))
    keys = ("seconds", "cpu_s", "peak_mib", "anon_mib", "rss_mib", "process_s")
    warm = [
        {"case": label, "docs": docs, "cache": got[0]["cache"]}
        | {k: median(r[k] for r in got) for k in keys}
        for label, got in runs.items()
    ]
    base = warm[0]
    for row in warm:
        row |= {"time_ratio": row["seconds"] / base["seconds"],
                "peak_ratio": row["peak_mib"] / max(base["peak_mib"], 1e-9)}  # fmt: skip
    return cold, warm


def _run(argv: list[str], megatron_path: str | None) -> dict[str, Any]:
    """One child (megatron-core on its path when ``megatron_path``): its row + process_s."""
    env = os.environ.get("PYTHONPATH")
    if megatron_path is not None:
        os.environ["PYTHONPATH"] = megatron_path
    try:
        child = run_child(argv, timeout=3600)
    finally:
        if env is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = env
    assert child.result is not None
    return child.result | {"process_s": child.seconds}


def emit_warm(
    args: argparse.Namespace, cold: list[dict[str, Any]], warm: list[dict[str, Any]]
) -> None:
    """Print and record the warm start table."""
    emit(
        args,
        "Megatron mode: warm start (indices cached) vs megatron-core 0.16.1, same data, one run",
        cold + warm,
        [
            ("case", "case", ""),
            ("docs", "documents", ",d"),
            ("cache", "indices from", ""),
            ("seconds", "start + first batch s", ".3f"),
            ("cpu_s", "CPU s", ".3f"),
            ("peak_mib", "peak RSS above imports MiB", ".1f"),
            ("anon_mib", "anonymous MiB after", ".1f"),
            ("rss_mib", "peak RSS MiB", ".0f"),
            ("process_s", "whole process s", ".2f"),
            ("time_ratio", "time / megatron-core", ".2f"),
            ("peak_ratio", "peak / megatron-core", ".2f"),
        ],
        notes=[
            f"Sparse .bin (uint16), real .idx; E = 3 request, split {WARM_SPLIT}, seq_len "
            f"{args.seq_len}, batch 8. Cold rows: one run each, building the indices (the "
            "row on megatron-core's cache builds only streamload's sequence table). Warm "
            f"rows: medians of {args.repeats} interleaved rounds, fresh interpreter each, "
            "timed after imports (whole process: with interpreter start and imports).",
            "peak RSS above imports: the child's VmHWM, reset after its imports, minus its "
            "VmRSS then (mapped pages it touches count, a whole page-cache folio per touch "
            "on this kernel); anonymous MiB after: RssAnon at the end minus after imports "
            "(the process's own memory). megatron-core: its builder over its cache + 8 "
            "samples collated (create_attention_mask off).",
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    add_common_args(parser)
    parser.add_argument("--docs", type=int_list, default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--megatron-path", default="/tmp/mcore", help="megatron-core install")
    parser.add_argument("--first-batch-docs", type=int, default=100_000)
    parser.add_argument(
        "--first-batch", action=argparse.BooleanOptionalAction, default=True,
        help="the cold/warm first-batch rows over --first-batch-docs real documents",
    )  # fmt: skip
    parser.add_argument("--warm-docs", type=int_list, default=[], help="warm start rows")
    parser.add_argument("--baseline-tree", default="", help="another streamload tree, warm")
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
        if args.warm_docs:
            os.environ["STREAMLOAD_CACHE_DIR"] = str(folder / "storage")  # catalog cache
            cold, warm = [], []
            for docs in args.warm_docs:
                rows = warm_rows(folder, docs, args)
                cold, warm = cold + rows[0], warm + rows[1]
            emit_warm(args, cold, warm)
        if not args.first_batch:
            return
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
