"""Megatron mode refuses, with a ``ConfigError`` naming the value, what it cannot do: indices
too large for the machine (said before anything is allocated) and a ``sampling.cache_dir``
that is a file or cannot be written (a complete cache in a read-only folder is still read)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamload import build_loader, load_config
from streamload.errors import ConfigError
from streamload.modes.megatron.stream import MegatronStream
from streamload.streams.interface import SampleStream
from tests.streams.test_megatron import config_of, load, prefixes
from tests.streams.test_megatron_cache import FIXTURE

__all__ = ["prefixes", "read_only"]  # the module fixture, re-exported for pytest

CASE = "gpt_e1_n"


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """Make ``folder`` refuse new entries for the block, also to root (``chattr +i``)."""
    if os.geteuid() != 0:
        mode = folder.stat().st_mode
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(mode)
        return
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(folder)]).returncode != 0:
        pytest.skip("running as root without chattr +i: no way to make a folder read-only")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", str(folder)], check=True)


def _stream(cfg: dict[str, Any]) -> MegatronStream:
    stream = SampleStream.from_config(load_config(cfg))
    assert isinstance(stream, MegatronStream)
    return stream


def _assert_golden(stream: MegatronStream, name: str) -> None:
    ids = np.arange(stream.pass_length or 0)
    np.testing.assert_array_equal(stream.read(0, ids)[0], load(name)[1]["text"][: ids.size])


# -- the size of the indices ---------------------------------------------------------------
@pytest.mark.parametrize("num_samples", [10**10, 10**12, 10**15])
def test_indices_too_large_are_refused_before_allocating(
    num_samples: int, prefixes: dict[str, str]
) -> None:
    cfg = config_of(CASE, prefixes, num_samples=num_samples)
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match=rf"num_samples = {num_samples}.*GiB.*memory"):
            _stream(cfg)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"allocated {peak} bytes before refusing"


def test_indices_too_large_for_the_cache_disk_are_refused(
    prefixes: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streamload.modes.megatron import indices as megatron_indices

    cfg = config_of(CASE, prefixes)
    cfg["sampling"]["cache_dir"] = str(tmp_path)
    monkeypatch.setattr(megatron_indices, "_free_disk", lambda path: 1000)  # a nearly full disk
    with pytest.raises(ConfigError, match=rf"KiB.*1000 bytes free.*{tmp_path}"):
        _stream(cfg)


# -- sampling.cache_dir --------------------------------------------------------------------
def test_a_cache_dir_that_is_a_file_is_a_config_error(
    prefixes: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "cache"
    path.write_text("not a folder")
    for where in (path, path / "below"):
        cfg = config_of(CASE, prefixes)
        cfg["sampling"]["cache_dir"] = str(where)
        with pytest.raises(ConfigError, match=rf"sampling\.cache_dir = '{where}'.*folder"):
            build_loader(cfg, batch_size=4)


def test_an_unwritable_cache_dir_without_a_cache_is_a_config_error(
    prefixes: dict[str, str], tmp_path: Path
) -> None:
    cfg = config_of(CASE, prefixes)
    cfg["sampling"]["cache_dir"] = str(tmp_path)
    with read_only(tmp_path), pytest.raises(ConfigError, match=rf"'{tmp_path}'.*writ"):
        _stream(cfg)
    assert not list(tmp_path.iterdir())


def test_a_complete_cache_in_a_read_only_folder_is_read(
    prefixes: dict[str, str], tmp_path: Path
) -> None:
    cfg = config_of(CASE, prefixes)
    cfg["sampling"]["cache_dir"] = str(tmp_path)
    _stream(cfg)
    files = sorted(p.name for p in tmp_path.iterdir())
    with read_only(tmp_path):
        stream = _stream(cfg)
    assert stream._files is not None
    _assert_golden(stream, CASE)
    assert sorted(p.name for p in tmp_path.iterdir()) == files


def test_megatron_core_files_in_a_read_only_folder_are_read(
    prefixes: dict[str, str], tmp_path: Path
) -> None:
    """As megatron-core itself does: a complete cache needs no write (no digest sidecar
    either: the files are checked by size, dtype and shape only)."""
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True)
    cfg = config_of("gpt_e3_separate", prefixes)
    cfg["sampling"]["cache_dir"] = str(tmp_path)
    with read_only(tmp_path):
        stream = _stream(cfg)
    assert stream._files is not None
    assert all("-GPTDataset-train-" in p for p in stream._files.values())
    _assert_golden(stream, "gpt_e3_separate")
