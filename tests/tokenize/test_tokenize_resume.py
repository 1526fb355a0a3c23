"""A ``streamload tokenize`` killed with SIGKILL and restarted writes exactly the clean output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamload.cli.main import main
from tests.tokenize.test_tokenize import sentences, tokenizer_path  # noqa: F401 - the fixture

GROUPS = 8


def command(tok: str, docs: Path, dst: Path) -> list[str]:
    return [sys.executable, "-m", "streamload.cli", "tokenize", "--documents", str(docs / "*"),
            "--destination", str(dst), "--tokenizer", tok, "--eos-token-id", "0",
            "--files-per-process", "1", "--batch-size", "500", "--max-size", "20000",
            "--no-progress"]  # fmt: skip


def markers(done: Path) -> list[str]:
    """Finished groups (a marker being written is a hidden temporary file)."""
    return [n for n in os.listdir(done) if not n.startswith(".")]


@pytest.mark.slow
def test_sigkill_then_restart_finishes_without_loss_or_duplicates(
    tokenizer_path: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    texts = sentences(3000, 1)
    for f in range(GROUPS):
        with open(docs / f"f{f}.jsonl", "w") as fh:
            fh.writelines(
                json.dumps({"id": f"{f}-{i}", "text": t}) + "\n" for i, t in enumerate(texts)
            )
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    assert main(command(tokenizer_path, docs, clean)[3:]) == 0

    proc = subprocess.Popen(command(tokenizer_path, docs, killed), stdout=subprocess.DEVNULL)
    done = killed / ".streamload-tokenize" / "done"
    deadline = time.monotonic() + 60
    while not (done.is_dir() and len(markers(done)) >= 2) and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = len(markers(done))
    assert 2 <= finished < GROUPS, f"kill landed after {finished} of {GROUPS} groups"

    restart = subprocess.run(
        command(tokenizer_path, docs, killed), check=True, capture_output=True, text=True
    )
    assert f"{finished} already done" in restart.stdout
    names = sorted(p.name for p in clean.iterdir() if not p.name.startswith("."))
    assert names == sorted(p.name for p in killed.iterdir() if not p.name.startswith("."))
    assert len(names) > GROUPS * 2  # several files per group
    for name in names:
        assert (clean / name).read_bytes() == (killed / name).read_bytes(), name
    staging = killed / ".streamload-tokenize" / "staging"
    assert not any(staging.iterdir())
