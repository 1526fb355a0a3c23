"""Tokens/s of ``streamload tokenize`` against bare ``tokenizers`` and ``dolma tokens``.

One synthetic JSONL corpus (``--files`` files of ``--docs-per-file`` documents, word salad
over a 2,000-word vocabulary, log-normal lengths) and one byte-level BPE trained on it
(``--vocab`` ids) are built once. Then, on the same text:

* ``tokenizers``: ``Tokenizer.encode_batch_fast`` over the stripped texts in batches of
  ``--batch-size`` (the Rust library alone: no JSON, no I/O, no writing);
* ``streamload 1p`` / ``2p``: ``streamload tokenize`` (dolma format) with 1 and 2 processes,
  timed from planning to the last rename, in this process (2p spawns its workers);
* ``dolma``: ``dolma tokens`` 1.2.1 installed aside (``--dolma-python``), same options, timed
  around its ``tokenize_in_parallel`` call inside its own process (interpreter start-up
  excluded); skipped when not installed.

Example:
    python benchmarks/tokenizing.py --files 4 --docs-per-file 20000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import add_common_args, emit, median

DOLMA_TIMER = """
import json, sys, time
from dolma.tokenizer.executor import tokenize_in_parallel
opts = json.loads(sys.argv[1])
start = time.perf_counter()
tokenize_in_parallel(**opts)
print(time.perf_counter() - start)
"""


def make_corpus(folder: Path, files: int, docs: int, vocab: int) -> list[str]:
    """Write the JSONL files and the tokenizer (once); return every text."""
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
             for _ in range(2000)]  # fmt: skip
    texts = [
        " ".join(rng.choice(words) for _ in range(max(1, int(rng.lognormvariate(5.0, 0.8)))))
        for _ in range(files * docs)
    ]
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        with open(folder / f"f{f}.jsonl", "w", encoding="utf-8") as fh:
            part = texts[f * docs : (f + 1) * docs]
            fh.writelines(
                json.dumps({"id": f"{f}-{i}", "text": t}) + "\n" for i, t in enumerate(part)
            )
    return texts


TRAIN = """
import json, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
folder, vocab = sys.argv[1], int(sys.argv[2])
texts = [json.loads(line)["text"] for line in open(folder + "/f0.jsonl")][:20000]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
tok.train_from_iterator(texts, trainer)
tok.save(folder + "/tokenizer.json")
"""


def train(python: str, folder: Path, vocab: int) -> None:
    """Train the BPE with ``python``: dolma's tokenizers (0.19) cannot load files saved by
    newer releases, so it is trained by dolma's when that is installed."""
    subprocess.run([python, "-c", TRAIN, str(folder), str(vocab)], check=True)


_BARE: dict[str, Any] = {}


def bare(tokenizer: str, texts: list[str], batch: int) -> tuple[float, int]:
    """Seconds and tokens of ``encode_batch_fast`` alone."""
    from tokenizers import Tokenizer

    tok = _BARE.get(tokenizer)
    if tok is None:  # one tokenizer for every repeat, warmed once: its word cache is full,
        tok = _BARE[tokenizer] = Tokenizer.from_file(tokenizer)  # as streamload's stays
        tok.encode_batch_fast(texts[:batch])
    stripped = [t.strip() for t in texts]
    start = time.perf_counter()
    tokens = 0
    for i in range(0, len(stripped), batch):
        tokens += sum(len(e.ids) for e in tok.encode_batch_fast(stripped[i : i + batch]))
    return time.perf_counter() - start, tokens


def ours(data: Path, out: Path, processes: int, batch: int, files: int) -> tuple[float, int]:
    """Seconds and tokens of one ``streamload tokenize`` run (fresh destination)."""
    from streamload.tokenize import TokenizeConfig, plan_run, run_plan

    shutil.rmtree(out, ignore_errors=True)
    config = TokenizeConfig(
        documents=(str(data / "*.jsonl"),), destination=str(out),
        tokenizer=str(data / "tokenizer.json"), eos_token_id=0, processes=processes,
        files_per_process=max(1, files // 2), batch_size=batch,
    )  # fmt: skip
    start = time.perf_counter()
    summary = run_plan(plan_run(config))
    return time.perf_counter() - start, summary.tokens


def dolma(python: str, data: Path, out: Path, processes: int, batch: int) -> float | None:
    """Seconds of ``dolma tokens`` (its own timer), or ``None`` when it is not installed."""
    if not os.path.exists(python):
        return None
    shutil.rmtree(out, ignore_errors=True)
    opts = {
        "sources": [str(data / "*.jsonl")], "destination": str(out),
        "tokenizer_name_or_path": str(data / "tokenizer.json"), "eos_token_id": 0,
        "num_writers": processes, "local_shuffle": batch, "dtype": "uint16",
        "metadata_dir": str(out) + "-meta",
    }  # fmt: skip
    shutil.rmtree(opts["metadata_dir"], ignore_errors=True)
    proc = subprocess.run(
        [python, "-c", DOLMA_TIMER, json.dumps(opts)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
        return None
    return float(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--docs-per-file", type=int, default=20000)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--batch-size", type=int, default=10000, help="documents per batch")
    parser.add_argument("--dolma-python", default="/tmp/dolmavenv/bin/python")
    args = parser.parse_args()
    data = Path(args.data_dir) / f"tokenize-{args.files}x{args.docs_per_file}-v{args.vocab}"
    texts = make_corpus(data, args.files, args.docs_per_file, args.vocab)
    dolma_ok = os.path.exists(args.dolma_python)
    train(args.dolma_python if dolma_ok else sys.executable, data, args.vocab)
    scratch = Path(tempfile.mkdtemp(prefix="tokenize-bench-"))
    runs: dict[str, list[float]] = {}
    total = 0
    for _ in range(args.repeats):
        seconds, total = bare(str(data / "tokenizer.json"), texts, args.batch_size)
        runs.setdefault("tokenizers encode_batch_fast", []).append(seconds)
        for p in (1, 2):
            seconds, tokens = ours(data, scratch / "out", p, args.batch_size, args.files)
            runs.setdefault(f"streamload tokenize, {p} process(es)", []).append(seconds)
            assert tokens == total + len(texts), (tokens, total)  # + one EOS per document
            d = dolma(args.dolma_python, data, scratch / "dolma", p, args.batch_size)
            if d is not None:
                runs.setdefault(f"dolma tokens 1.2.1, {p} process(es)", []).append(d)
    shutil.rmtree(scratch, ignore_errors=True)
    base = total / median(runs["tokenizers encode_batch_fast"])
    rows: list[dict[str, Any]] = []
    for case, values in runs.items():
        rate = total / median(values)
        rows.append({"case": case, "s": median(values), "mtok": rate / 1e6, "ratio": rate / base})
    emit(
        args,
        "Tokenizing: streamload tokenize vs tokenizers encode_batch and dolma tokens",
        rows,
        [
            ("case", "case", ""),
            ("s", "seconds", ".2f"),
            ("mtok", "M tokens/s", ".3f"),
            ("ratio", "ratio to encode_batch", ".2f"),
        ],
        [
            f"{len(texts):,} documents in {args.files} JSONL files, {total:,} tokens (EOS "
            f"excluded), byte-level BPE of {args.vocab} ids; batch {args.batch_size}; median "
            f"of {args.repeats}.",
            "Rates count text tokens only, over the same texts for every case; streamload and "
            "dolma also parse JSON and write the dolma .npy + .csv.gz.",
            "dolma runs tokenizers 0.19.1 (its pin), streamload and the bare case 0.23.3.",
        ],
    )


if __name__ == "__main__":
    main()
