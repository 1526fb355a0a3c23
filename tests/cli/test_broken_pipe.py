"""A reader that closes the pipe early (``streamload docs ... | head -1``) ends the command
quietly: no traceback, the shell's 141."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.corpus_factory import write_corpus


@pytest.mark.slow
def test_a_closed_pipe_ends_the_command_without_a_traceback(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "data", [300_000], mean_doc_len=8.0)
    command = [sys.executable, "-m", "streamload", "docs", str(corpus.folder), "--eos", "0"]
    command += ["--count", "30000"]  # about a megabyte: far more than a pipe holds
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.readline()
    process.stdout.close()  # the reader leaves after one line
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141
    assert "Traceback" not in err, err
