"""Launch real gloo ranks on 127.0.0.1: each rank is a subprocess running a test file.

The test file runs as a script in each rank (``python test_x.py <args>``); the ranks find each
other through the ``env://`` variables set here.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

TIMEOUT = 120
"""Seconds a rank may take before the whole launch fails."""

RankProcesses = list[subprocess.Popen[bytes]]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(script: str | Path, world: int, args: Sequence[object]) -> RankProcesses:
    """Start ``world`` ranks of ``python script *args`` in one fresh process group."""
    port, procs = free_port(), []
    for rank in range(world):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
        }
        cmd = [sys.executable, str(script), *map(str, args)]
        procs.append(
            subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
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
    """Run ``world`` ranks of ``python script phase *args`` and wait for all of them."""
    wait({f"{phase} on {world} ranks": start(script, world, [phase, *args])})
