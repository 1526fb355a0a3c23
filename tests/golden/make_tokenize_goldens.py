"""Write the golden outputs of ``tests/golden/tokenize/`` with the real tools.

1. Trains a tiny byte-level BPE (300 ids, ``<|endoftext|>`` = 0, ``<|bos|>`` = 1) with the
   ``tokenizers`` library and writes the input JSONL files (edge cases: surrounding
   whitespace, empty text, a text already ending in EOS, a missing id, non-ASCII).
2. Runs ``dolma tokens`` 1.2.1 (installed aside, never in the project venv) on them, once
   with EOS only and once with BOS and EOS, and keeps its ``.npy`` + ``.csv.gz``.
3. Feeds the dolma documents, in input order, to megatron-core 0.16.1
   ``IndexedDatasetBuilder`` (uint16) and keeps ``.bin`` + ``.idx``.

Modalities' ``pack_encoded_data`` runs in its own script, ``make_modalities_goldens.py`` (it
needs transformers and more, installed aside).

Run from the repository root::

    python3 -m venv /tmp/dolmavenv && /tmp/dolmavenv/bin/pip install --no-deps dolma==1.2.1
    /tmp/dolmavenv/bin/pip install msgspec omegaconf smart-open necessary 'tokenizers==0.19.1' \\
        'numpy<2' tqdm rich pyyaml platformdirs fsspec 's3fs==2023.6.0' boto3 python-dotenv \\
        anyascii charset-normalizer zstandard requests jsonpath-ng uniseg fasttext-wheel \\
        blingfire jq nltk
    pip install --target /tmp/mcore megatron-core==0.16.1
    .venv/bin/python tests/golden/make_tokenize_goldens.py
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

OUT = Path(__file__).parent / "tokenize"
DOLMA_PYTHON = os.environ.get("DOLMA_PYTHON", "/tmp/dolmavenv/bin/python")
MCORE_PATH = os.environ.get("MCORE_PATH", "/tmp/mcore")
WORDS = [
    *("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog"),
    *("data", "stream", "load", "token", "shard"),
]
CASES = {"eos": {"eos_token_id": 0}, "bos_eos": {"bos_token_id": 1, "eos_token_id": 0}}
"""Golden cases: their dolma tokenizer options."""


def texts(n: int, seed: int) -> list[str]:
    """Random sentences over a small vocabulary (with a few non-ASCII words)."""
    rng = random.Random(seed)
    words = [*WORDS, "café", "naïve", "日本"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 30))) for _ in range(n)]


def train_tokenizer(path: Path) -> None:
    """The goldens' tokenizer (``tests/helpers/tokenizer.py``) trained on 400 of :func:`texts`."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
    from tests.helpers.tokenizer import train_bpe

    train_bpe(path, texts(400, 0))


def write_inputs(folder: Path) -> None:
    """``docs.jsonl`` (edge cases) and ``more.jsonl.gz``."""
    rows: list[dict[str, object]] = [{"id": f"a{i}", "text": t} for i, t in enumerate(texts(40, 1))]
    rows[3]["text"] = "  \n padded text with spaces \t\n"
    rows[5]["text"] = "   "
    rows[7]["text"] = "ends with eos<|endoftext|>"
    rows[9]["text"] = "<|bos|>starts with bos"
    del rows[11]["id"]
    rows[13]["text"] = ""
    with open(folder / "docs.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    with gzip.open(folder / "more.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.writelines(
            json.dumps({"id": f"b{i}", "text": t}) + "\n" for i, t in enumerate(texts(25, 2))
        )


DOLMA_SCRIPT = """
import sys, json
from dolma.tokenizer.executor import tokenize_in_parallel
opts = json.loads(sys.argv[1])
tokenize_in_parallel(sources=["docs.jsonl", "more.jsonl.gz"], destination=opts.pop("dst"),
    tokenizer_name_or_path="tokenizer.json", num_writers=1, dtype="uint16",
    metadata_dir=opts.pop("meta"), **opts)
"""

MCORE_SCRIPT = """
import sys, numpy as np, torch
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
docs = [np.array(d, dtype=np.int64) for d in __import__("json").load(open(sys.argv[1]))]
builder = IndexedDatasetBuilder(sys.argv[2] + ".bin", dtype=np.uint16)
for d in docs:
    builder.add_document(torch.from_numpy(d), [len(d)])
builder.finalize(sys.argv[2] + ".idx")
"""


def dolma_documents(folder: Path) -> list[list[int]]:
    """dolma's documents in input order (by file, then line), read from its output."""
    import numpy as np

    docs = []
    for npy in sorted(folder.glob("part-*.npy")):
        tokens = np.fromfile(npy, dtype="<u2")
        with gzip.open(npy.with_suffix(".csv.gz"), "rt", newline="") as fh:
            import csv

            for start, end, _id, src, loc in csv.reader(fh):
                key = (["docs.jsonl", "more.jsonl.gz"].index(src), int(loc))
                docs.append((key, tokens[int(start) : int(end)].tolist()))
    return [d for _, d in sorted(docs)]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    # trained by dolma's tokenizers (0.19): newer releases save merges 0.19 cannot load
    subprocess.run([DOLMA_PYTHON, __file__, "--train", str(OUT / "tokenizer.json")], check=True)
    write_inputs(OUT)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in ("tokenizer.json", "docs.jsonl", "more.jsonl.gz"):
            shutil.copy(OUT / name, work / name)
        for case, options in CASES.items():
            dst = OUT / f"dolma_{case}"
            shutil.rmtree(dst, ignore_errors=True)
            opts = {**options, "dst": str(work / case), "meta": str(work / f"{case}-meta")}
            subprocess.run(
                [DOLMA_PYTHON, "-c", DOLMA_SCRIPT, json.dumps(opts)], cwd=work, check=True
            )
            shutil.copytree(work / case, dst)
            if case == "eos":
                docs = dolma_documents(dst)
                (work / "docs.json").write_text(json.dumps(docs))
                env = {**os.environ, "PYTHONPATH": MCORE_PATH}
                prefix = OUT / "megatron_eos" / "docs_text_document"
                prefix.parent.mkdir(exist_ok=True)
                subprocess.run(
                    [sys.executable, "-c", MCORE_SCRIPT, str(work / "docs.json"), str(prefix)],
                    env=env,
                    check=True,
                )
    print(f"wrote goldens to {OUT}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--train"]:
        train_tokenizer(Path(sys.argv[2]))
    else:
        main()
