"""The built-in demo: a small corpus, a loader run, a checkpoint, and an exact resume.

Used by ``streamload demo`` (the README's first command). The resume runs in a fresh Python
process with another worker count, and its batches are compared digest by digest with the
uninterrupted run.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from streamload.loader import build_loader

__all__ = ["batch_digest", "make_demo_corpus", "resume_segment", "run_demo"]

DEMO_TOML = """\
seq_len = {seq_len}
seed = 1234
eos_token_id = 0
vocab_size = {vocab_size}

[[sources]]
name = "demo"
path = "shards/"

[sampling]
shuffle = true

[packing]
masks = true
"""


def make_demo_corpus(
    folder: Path, *, num_tokens: int = 4_000_000, num_shards: int = 4, seq_len: int = 512
) -> Path:
    """Write NPY uint16 shards of log-normal documents (median ~500 tokens, EOS = 0).

    Returns:
        The path of the ``data.toml`` written beside the shards.
    """
    vocab_size = 50304
    rng = np.random.default_rng(0)
    shards = folder / "shards"
    shards.mkdir(parents=True, exist_ok=True)
    per_shard = num_tokens // num_shards
    for index in range(num_shards):
        tokens = rng.integers(1, vocab_size, size=per_shard, dtype=np.uint16)
        lengths = np.maximum(1, rng.lognormal(np.log(500), 1.0, size=per_shard // 50)).astype(int)
        ends = np.cumsum(lengths)
        tokens[ends[ends <= per_shard] - 1] = 0
        np.save(shards / f"shard_{index:05d}.npy", tokens)
    config = folder / "data.toml"
    config.write_text(DEMO_TOML.format(seq_len=seq_len, vocab_size=vocab_size))
    return config


def batch_digest(batch: dict[str, torch.Tensor]) -> str:
    """sha256 over every tensor of a batch, in key order."""
    digest = hashlib.sha256()
    for key in sorted(batch):
        digest.update(key.encode())
        digest.update(batch[key].contiguous().numpy().tobytes())
    return digest.hexdigest()


def resume_segment(config: Path, state_path: Path, num_workers: int, out: Path) -> int:
    """In a fresh process: load a state, run the rest of the pass, write batch digests."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = build_loader(config, batch_size=8, num_workers=num_workers)
    loader.load_state_dict(json.loads(state_path.read_text()))
    out.write_text(json.dumps([batch_digest(b) for b in loader]))
    return 0


def run_demo(folder: Path, *, num_workers: int = 2, resume_workers: int = 1) -> bool:
    """Run the demo and print what happens; returns whether the resume was exact."""
    config = make_demo_corpus(folder)
    print(f"corpus: {folder / 'shards'} (4 NPY shards, 4M uint16 tokens); config {config}")
    with warnings.catch_warnings():  # the demo pass drops 4 samples; that is expected here
        warnings.simplefilter("ignore")
        loader = build_loader(config, batch_size=8, num_workers=num_workers)
    save_at = len(loader) // 2
    digests, tokens, start = [], 0, time.perf_counter()
    for step, batch in enumerate(loader):
        digests.append(batch_digest(batch))
        tokens += batch["input_ids"].numel()
        if step == save_at:
            state = loader.state_dict()
            (folder / "state.json").write_text(json.dumps(state))
    elapsed = time.perf_counter() - start
    print(
        f"uninterrupted run: {len(digests)} batches of 8 x 512 with masks, {num_workers} workers,"
        f" {tokens / elapsed:,.0f} tokens/s"
    )
    print(f"state saved after batch {save_at}: {json.dumps(state['cursor'])}")
    resumed = folder / "resumed.json"
    cmd = [
        sys.executable,
        "-m",
        "streamload.cli",
        "demo",
        "--dir",
        str(folder),
        "--resume",
        "--num-workers",
        str(resume_workers),
    ]
    subprocess.run(cmd, check=True)
    rest = json.loads(resumed.read_text())
    exact = rest == digests[save_at + 1 :]
    verdict = "identical" if exact else "DIFFERENT"
    print(
        f"fresh process, {resume_workers} worker(s): {len(rest)} batches after the checkpoint, "
        f"{verdict} to the uninterrupted run"
    )
    return exact


def describe(folder: Path) -> dict[str, Any]:
    """Paths the demo uses inside ``folder``."""
    return {
        "config": folder / "data.toml",
        "state": folder / "state.json",
        "resumed": folder / "resumed.json",
    }
