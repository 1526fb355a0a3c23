"""``inspect``, ``validate`` and ``docs`` hold a bounded number of files open at any shard
count (issue 31: ``inspect`` opened every shard at once and failed with ``EMFILE``, too many
open files, at 10^4 Megatron and 10^5 NumPy shards).

Each command runs in a fresh interpreter whose open-file limit is lowered to
:data:`FILE_LIMIT`, far below the shards' files; a control run shows that opening every shard
at once fails under that limit, so the limit does bite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.paths import REPO
from tests.helpers.shards import write_megatron_documents

pytestmark = pytest.mark.slow  # a dozen interpreters, each importing numpy

resource = pytest.importorskip("resource")  # POSIX only

SHARDS = 300
"""Shards per folder: a Megatron shard maps two files, so all at once need 600 descriptors."""

FILE_LIMIT = 64
"""The soft ``RLIMIT_NOFILE`` of the commands (the interpreter and numpy need about 10)."""

EOS = 0


def shard_tokens(index: int) -> np.ndarray:
    """Shard ``index``'s 12 tokens: documents of 4 and 8 tokens, each ending in EOS."""
    tokens = ((np.arange(12) + index) % 97 + 1).astype(np.uint16)
    tokens[[3, 11]] = EOS
    return tokens


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``megatron``: :data:`SHARDS` Megatron datasets; ``numpy``: as many ``.npy`` shards."""
    root = tmp_path_factory.mktemp("many_shards")
    (root / "megatron").mkdir()
    (root / "numpy").mkdir()
    for i in range(SHARDS):
        write_megatron_documents(root / "megatron" / f"part_{i:05d}", shard_tokens(i), [4, 8])
        np.save(root / "numpy" / f"part_{i:05d}.npy", shard_tokens(i))
    return {"megatron": root / "megatron", "numpy": root / "numpy"}


def _limit_open_files() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (FILE_LIMIT, hard))


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    """``python *args`` under the lowered open-file limit."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_limit_open_files,
    )


def _streamload(*args: str) -> str:
    done = _run("-m", "streamload", *args)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


_OPEN_ALL = """
import sys
from streamload.catalog.sources import describe_source
from streamload.config import SourceConfig
from streamload.formats.registry import open_shard

catalog = describe_source(SourceConfig(name="x", path=sys.argv[1]), None, eos_token_id=0)
opened = [open_shard(info) for info in catalog.shards]
"""


@pytest.mark.parametrize("fmt", ["megatron", "numpy"])
def test_opening_every_shard_at_once_exceeds_the_limit(folders: dict[str, Path], fmt: str) -> None:
    """The control: the limit is low enough that the old ``open_all`` failed."""
    done = _run("-c", _OPEN_ALL, str(folders[fmt]))
    assert done.returncode != 0
    assert "Too many open files" in done.stderr


@pytest.mark.parametrize("fmt", ["megatron", "numpy"])
def test_inspect_streams_over_the_shards(folders: dict[str, Path], fmt: str) -> None:
    report = json.loads(_streamload("inspect", str(folders[fmt]), "--eos", str(EOS), "--json"))
    assert [s["path"] for s in report["shards"]] == [
        str(folders[fmt] / f"part_{i:05d}{'.bin' if fmt == 'megatron' else '.npy'}")
        for i in range(SHARDS)
    ]
    assert [s["num_documents"] for s in report["shards"]] == [2] * SHARDS
    assert (report["num_documents"], report["num_tokens"]) == (2 * SHARDS, 12 * SHARDS)
    text = _streamload("inspect", str(folders[fmt]), "--eos", str(EOS))
    assert text.splitlines()[0] == f"format {fmt}, dtype uint16, 3,600 tokens, 600 documents"


@pytest.mark.parametrize("fmt", ["megatron", "numpy"])
def test_validate_streams_over_the_shards(folders: dict[str, Path], fmt: str) -> None:
    out = _streamload("validate", str(folders[fmt]), "--eos", str(EOS), "--vocab-size", "100")
    assert f"sound: 3,600 tokens in {SHARDS} files" in out.splitlines()


@pytest.mark.parametrize("fmt", ["megatron", "numpy"])
def test_docs_reach_the_last_shard(folders: dict[str, Path], fmt: str) -> None:
    """The last three documents lie in the last two shards: every shard before them is
    opened to count its documents."""
    start = 2 * SHARDS - 3
    out = _streamload("docs", str(folders[fmt]), "--eos", str(EOS), "--start", str(start))
    last, before = shard_tokens(SHARDS - 1).tolist(), shard_tokens(SHARDS - 2).tolist()
    expected = [before[4:], last[:4], last[4:]]
    assert out.splitlines() == [
        f"{start + i}: {' '.join(map(str, doc))}" for i, doc in enumerate(expected)
    ]


_ONE_BIG_BATCH = """
import hashlib, json, sys
import streamload

mode, folder = sys.argv[1], sys.argv[2]
config = {"seq_len": 7, "seed": 3, "eos_token_id": 0, "vocab_size": 100,
          "sources": [{"name": "x", "path": folder}],
          "sampling": {"shuffle": True, "mode": mode}, "packing": {"masks": True}}
if mode == "packed":
    config["pad_token_id"] = 99
with streamload.build_loader(config, batch_size=256, num_workers=0) as loader:
    batches = [next(iter(loader)) for _ in range(1)]
digest = hashlib.sha256()
for batch in batches:
    for key in sorted(batch):
        if hasattr(batch[key], "numpy"):
            digest.update(key.encode() + batch[key].numpy().tobytes())
print(digest.hexdigest())
"""


@pytest.mark.parametrize("mode", ["concat", "packed"])
@pytest.mark.parametrize("fmt", ["megatron", "numpy"])
def test_a_batch_over_every_shard_holds_few_files(
    folders: dict[str, Path], fmt: str, mode: str
) -> None:
    """The loader's chunks touch most of the 300 shards (256 shuffled samples of 7 tokens over
    3,600, or 256 packed rows), yet hold a bounded number of them: the batches equal those of
    a run without the limit."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [sys.executable, "-c", _ONE_BIG_BATCH, mode, str(folders[fmt])]
    free = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert free.returncode == 0, free.stderr[-2000:]
    limited = _run("-c", _ONE_BIG_BATCH, mode, str(folders[fmt]))
    assert limited.returncode == 0, limited.stderr[-2000:]
    assert limited.stdout == free.stdout
