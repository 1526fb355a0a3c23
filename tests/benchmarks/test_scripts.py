"""The benchmark scripts that never run in tests start and parse their flags.

``benchmarks/gpu_step.py`` needs a GPU for its real run and ``benchmarks/trainer_cost.py``
minutes of several processes: here only ``--help`` and ``--dry-run`` (fresh interpreters, no
CUDA), and the ``/proc`` reader the rank bill's memory columns come from.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.paths import REPO

BENCH = REPO / "benchmarks"


def run_script(*argv: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_gpu_step_help_and_dry_run_without_cuda() -> None:
    assert "--device" in run_script(str(BENCH / "gpu_step.py"), "--help")
    cases = run_script(str(BENCH / "gpu_step.py"), "--dry-run", "--device", "cpu", "--quick")
    lines = cases.splitlines()
    assert lines[:3] == ["resident full", "resident compact", "resident packed"]
    assert "streamload packed workers=2 thread" in lines
    assert lines[-2] == "StatefulDataLoader full workers=1 process"  # --quick's peer workers
    assert "'seq_len': 128" in lines[-1] and "'batch_size': 2" in lines[-1]


def test_trainer_cost_help_names_the_rank_bill() -> None:
    out = run_script(str(BENCH / "trainer_cost.py"), "--help")
    for flag in ("--ranks", "--tokens", "--quick", "--layouts", "--worker-kinds"):
        assert flag in out


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="Linux /proc only")
def test_read_rollup_of_this_process() -> None:
    """USS <= PSS <= RSS <= peak RSS, all positive (the columns' invariants)."""
    sys.path.insert(0, str(BENCH))
    try:
        from _proc_memory import TreePeak, read_rollup, sample_tree
    finally:
        sys.path.remove(str(BENCH))
    values = read_rollup(os.getpid())
    assert 0 < values["USS"] <= values["Pss"] <= values["Rss"] <= values["VmHWM"]
    peak = TreePeak()
    sample_tree(os.getpid(), peak)
    assert peak.processes >= 1 and 0 < peak.uss <= peak.pss and peak.main_hwm > 0
