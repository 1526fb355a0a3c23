"""Documents/s of ``open_documents`` over the same texts in every input kind (issue 32).

One synthetic corpus (``--docs`` documents of word salad, log-normal lengths, ids ``d0``…)
is written once into ``--data-dir/text-inputs-N`` as:

* ``jsonl``: ``docs.jsonl`` (``{"id", "text"}`` per line) and ``jsonl.gz`` (gzip level 6);
* ``parquet``: ``pyarrow.parquet.write_table``, row groups of 10,000 rows (``to_parquet``
  writes 1,000-row batches; the reader converts ``--batch-rows`` rows at a time either way);
* ``arrow``: one Arrow IPC stream, record batches of 1,000 rows (``save_to_disk``'s);
* ``mds``: one ``shard.00000.mds`` of ``str`` columns ``id``, ``text`` (MDSWriter's layout,
  written by streamload's ``MdsShards``) and its ``index.json``.

Each case opens the file with ``streamload.tokenize.inputs.open_documents`` (text and id
fields, the rules ``streamload tokenize`` applies: strip, skip empty, ids) and takes every
document. Cases run round-robin within each repeat; the table gives medians and each case's
ratio to plain JSONL in the same run. Tokenizing is not included (``tokenizing.py`` measures
it): these are the rates a tokenizer is fed at.

Example:
    python benchmarks/text_inputs.py --docs 100000 --repeats 5
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import add_common_args, emit, median

CASES = ("jsonl", "jsonl.gz", "parquet", "arrow", "mds")


def texts(count: int) -> list[str]:
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
             for _ in range(2000)]  # fmt: skip
    return [
        " ".join(rng.choice(words) for _ in range(max(1, int(rng.lognormvariate(4.0, 0.8)))))
        for _ in range(count)
    ]


def write_corpus(folder: Path, count: int) -> dict[str, str]:
    """Each case's file (written once; a finished corpus has ``done``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from streamload.formats.mds.write import MdsShards

    paths = {
        "jsonl": folder / "docs.jsonl", "jsonl.gz": folder / "docs.jsonl.gz",
        "parquet": folder / "docs.parquet", "arrow": folder / "docs.arrow",
        "mds": folder / "mds" / "shard.00000.mds",
    }  # fmt: skip
    if not (folder / "done").exists():
        (folder / "mds").mkdir(parents=True, exist_ok=True)
        docs = texts(count)
        ids = [f"d{i}" for i in range(count)]
        lines = "".join(
            json.dumps({"id": i, "text": t}) + "\n" for i, t in zip(ids, docs, strict=True)
        )
        paths["jsonl"].write_text(lines, encoding="utf-8")
        paths["jsonl.gz"].write_bytes(gzip.compress(lines.encode("utf-8"), 6))
        table = pa.table({"text": docs, "id": ids})
        pq.write_table(table, paths["parquet"], row_group_size=10_000)
        with (
            pa.OSFile(str(paths["arrow"]), "wb") as sink,
            pa.ipc.new_stream(sink, table.schema) as w,
        ):
            w.write_table(table, max_chunksize=1000)
        shards = MdsShards(str(folder / "mds"), {"id": "str", "text": "str"}, size_limit=None)
        for i, t in zip(ids, docs, strict=True):
            shards.add({"id": i.encode(), "text": t.encode()})
        shards.finish()
        (folder / "done").write_text("")
    return {case: str(path) for case, path in paths.items()}


def measure(path: str) -> tuple[float, int]:
    """Seconds to take every document of ``path``, and how many there were."""
    from streamload.tokenize.inputs import open_documents

    start = time.perf_counter()
    count = sum(1 for _ in open_documents(path, "text", "id"))
    return time.perf_counter() - start, count


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--docs", type=int, default=100_000, help="documents in the corpus")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    folder = Path(args.data_dir) / f"text-inputs-{args.docs}"
    paths = write_corpus(folder, args.docs)
    seconds: dict[str, list[float]] = {case: [] for case in CASES}
    for _ in range(args.repeats):
        for case in CASES:
            took, count = measure(paths[case])
            if count != args.docs:
                sys.exit(f"{case}: {count} documents, expected {args.docs}")
            seconds[case].append(took)
    text_mb = os.path.getsize(paths["jsonl"]) / 1e6
    base = median(seconds["jsonl"])
    rows: list[dict[str, Any]] = []
    for case in CASES:
        took = median(seconds[case])
        rows.append({
            "case": case, "file_mb": round(os.path.getsize(paths[case]) / 1e6, 2),
            "seconds": took, "min_seconds": min(seconds[case]),
            "docs_per_s": args.docs / took, "jsonl_mb_per_s": text_mb / took,
            "ratio": base / took,
        })  # fmt: skip
    columns = [
        ("case", "input", "s"), ("file_mb", "file MB", ".2f"), ("seconds", "med (s)", ".3f"),
        ("min_seconds", "min (s)", ".3f"), ("docs_per_s", "docs/s", ",.0f"),
        ("jsonl_mb_per_s", "MB/s (as JSONL)", ".1f"), ("ratio", "x plain JSONL", ".2f"),
    ]  # fmt: skip
    notes = [
        f"{args.docs:,} documents ({text_mb:.1f} MB as JSONL), medians of {args.repeats} "
        "round-robin repeats; open_documents(path, 'text', 'id') taken to the end, no "
        "tokenizing; MB/s counts the JSONL size of the same texts for every input.",
        "x plain JSONL: median JSONL time / median time of the case (above 1: faster).",
    ]
    emit(args, "Text inputs: documents/s of open_documents per input kind", rows, columns, notes)


if __name__ == "__main__":
    main()
