"""A script that takes a few batches and returns exits with code 0 (issue 36, item 6).

It used to end in ``terminate called without an active exception`` (SIGABRT) in 2 to 11 of
40 runs with thread workers: the interpreter ended a worker thread that was inside numpy's
C++ code (``streamload/nodes/_exit.py`` says why and how it is stopped first). Each trial is
a forked child that takes 8 batches and leaves through the interpreter's normal shutdown
(``tests/helpers/exit_trials.py``), through every entry point and worker kind.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.paths import REPO


def run_trials(folder: Path, **trials: int) -> dict[str, list[dict[str, object]]]:
    """Run ``kind=count`` trials (``loader_thread=3`` for ``loader-thread``); the failures
    of each kind."""
    args = [f"{kind.replace('_', '-')}={count}" for kind, count in trials.items()]
    done = subprocess.run(
        [sys.executable, "-m", "tests.helpers.exit_trials", str(folder), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, list[dict[str, object]]] = json.loads(done.stdout.splitlines()[-1])
    return result


def assert_all_exited_cleanly(failures: dict[str, list[dict[str, object]]]) -> None:
    bad = {kind: found for kind, found in failures.items() if found}
    assert not bad, f"trials that did not exit with code 0 cleanly: {bad}"


@pytest.fixture
def cpu_hog() -> Iterator[None]:
    """A busy-looping process beside the trials (a loaded machine shifts every timing)."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        hog.kill()
        hog.wait()


def test_every_entry_point_exits_cleanly(tmp_path: Path) -> None:
    """A handful of trials of each kind (the slow test below runs hundreds)."""
    failures = run_trials(
        tmp_path,
        busy_thread=3,
        loader_thread=3,
        loader_0=1,
        loader_process=1,
        dataset_0=1,
        dataset_2=1,
    )
    assert_all_exited_cleanly(failures)


@pytest.mark.slow
def test_hundreds_of_exits_are_clean(tmp_path: Path) -> None:
    failures = run_trials(
        tmp_path,
        busy_thread=50,
        loader_thread=40,
        busy_process=8,
        loader_process=8,
        loader_0=6,
        dataset_0=6,
        dataset_2=10,
    )
    assert_all_exited_cleanly(failures)


@pytest.mark.slow
@pytest.mark.usefixtures("cpu_hog")
def test_exits_are_clean_on_a_busy_machine(tmp_path: Path) -> None:
    failures = run_trials(tmp_path, busy_thread=40, loader_thread=30, loader_process=5, dataset_2=5)
    assert_all_exited_cleanly(failures)
