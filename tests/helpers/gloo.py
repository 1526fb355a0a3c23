"""Launch real gloo ranks on 127.0.0.1: each rank is a subprocess running a test file.

The test file runs as the main module in each rank (``python -m tests.test_x <args>``, from the
repository root, which is also put first on ``PYTHONPATH``), so it imports ``tests.helpers``
and this checkout's ``streamload`` as the tests do. Not ``python tests/test_x.py``: that puts
the script's folder first on ``sys.path``, where ``tests/tokenize/`` would hide the standard
library's ``tokenize``. The ranks find each other through the ``env://`` variables set here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from tests.helpers.paths import REPO
from tests.servers import free_port

TIMEOUT = 120
"""Seconds a rank may take before the whole launch fails."""

RankProcesses = list[subprocess.Popen[bytes]]


def module_of(script: str | Path) -> str:
    """The module name of a file under the repository root (``tests.streams.test_x``)."""
    return ".".join(Path(script).resolve().relative_to(REPO).with_suffix("").parts)


def start(script: str | Path, world: int, args: Sequence[object]) -> RankProcesses:
    """Start ``world`` ranks of ``python -m <script's module> *args`` in one fresh process
    group."""
    port, procs = free_port(), []
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    for rank in range(world):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": pythonpath,
        }
        cmd = [sys.executable, "-m", module_of(script), *map(str, args)]
        procs.append(
            subprocess.Popen(
                cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        )
    return procs


def wait(groups: Mapping[str, RankProcesses], timeout: float = TIMEOUT) -> None:
    """Wait for every rank of every group; fail with the output of those that failed.

    A rank that does not finish in ``timeout`` seconds kills every rank of every group.
    """
    failures = []
    for phase, procs in groups.items():
        for rank, proc in enumerate(procs):
            try:
                output, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                for other in (p for ps in groups.values() for p in ps):
                    other.kill()
                pytest.fail(f"{phase}: rank {rank} did not finish in {timeout} s")
            if proc.returncode != 0:
                text = output.decode()[-3000:]
                failures.append(f"{phase} rank {rank} exited {proc.returncode}:\n{text}")
    assert not failures, "\n".join(failures)


def launch(script: str | Path, phase: str, world: int, *args: object) -> None:
    """Run ``world`` ranks of ``python -m <script's module> phase *args`` and wait for all of
    them."""
    wait({f"{phase} on {world} ranks": start(script, world, [phase, *args])})
