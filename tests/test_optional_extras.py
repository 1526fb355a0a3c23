"""Tests of an optional extra skip, never fail or error, where the extra is absent (issue 36,
item 20): ``zstandard`` (extras ``mds``, ``tokenizers``) and import-linter's ``grimp`` (dev).

The shared environment has every extra, so absence is simulated: pytest runs in a subprocess
with ``tests.helpers.block_imports``, which makes ``import zstandard`` and ``import grimp``
raise ``ImportError``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.helpers.block_imports import BLOCKED_ENV
from tests.helpers.paths import REPO

ZSTD_FILES = [
    "tests/formats/test_mds.py",
    "tests/formats/test_mds_write.py",
    "tests/formats/test_litdata.py",
    "tests/tokenize/test_tokenize.py",
    "tests/tools/test_convert_targets.py",
    "tests/config/test_config.py",
]


def pytest_without(blocked: str, *args: str) -> tuple[dict[str, int], str]:
    """Run pytest on ``args`` with the packages ``blocked`` (comma-separated) made absent;
    the summary counts (``passed``, ``skipped``, ``failed``, ``error``...) and the output."""
    env = {**os.environ, BLOCKED_ENV: blocked}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.helpers.block_imports",
         "-p", "no:cacheprovider", "-q", "-rs", "-m", "not slow", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (\w+)", summary)}
    return counts, done.stdout[-4000:] + done.stderr[-2000:]


def test_the_architecture_tests_skip_without_import_linter() -> None:
    counts, out = pytest_without("grimp", "tests/test_architecture.py")
    assert counts.get("skipped") == 2, out
    assert "failed" not in counts and "error" not in counts and "errors" not in counts, out
    assert "import-linter (grimp) is not installed" in out


def test_a_zstd_test_skips_without_zstandard() -> None:
    test = "tests/formats/test_mds.py::test_corrupt_zstd_is_refused"
    counts, out = pytest_without("zstandard", test)
    assert counts == {"skipped": 1}, out
    assert "needs zstandard" in out


@pytest.mark.slow
def test_every_zstd_test_skips_without_zstandard() -> None:
    counts, out = pytest_without("zstandard", *ZSTD_FILES)
    assert "failed" not in counts and "error" not in counts and "errors" not in counts, out
    assert counts.get("skipped", 0) >= 12, out
    assert counts.get("passed", 0) > 100, out  # the others still run


def test_the_chat_tests_skip_without_jinja2() -> None:
    counts, out = pytest_without(
        "jinja2", "tests/tokenize/test_chat.py", "tests/catalog/test_text_chat.py"
    )
    assert counts == {"skipped": 2}, out
    assert "chat templates need jinja2" in out
