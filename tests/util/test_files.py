"""Atomic outputs: temporary names that say whose they are, whole outputs published at once,
and the clean-up of what killed writers leave (real files, real processes)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamload.errors import ConfigError
from streamload.util import files
from streamload.util.files import (
    STALE_TEMP_AGE,
    is_temp_name,
    remove_stale_temps,
    staged_output,
    temp_beside,
)
from tests.helpers.paths import REPO

LEAVE_TEMPS = """
import os, sys
from streamload.util.files import staged_output, temp_beside
folder = sys.argv[1]
temp_beside(os.path.join(folder, "a.bin"))
staging = staged_output(os.path.join(folder, "b.idx"), os.path.join(folder, "b.bin"))
with open(os.path.join(staging.__enter__(), "b.bin"), "wb") as fh:
    fh.write(b"partial")
print("ready", flush=True)
sys.stdin.read()  # hold the temporaries until the parent closes stdin
os._exit(0)  # die without clean-up, as a killed writer does
"""
"""A writer that makes a temporary file and a staging folder, then dies without cleaning."""


def hidden(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.startswith("."))


def age(path: Path, seconds: float) -> None:
    """Set the modification time of ``path`` (and everything in it) ``seconds`` back."""
    then = time.time() - seconds
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.utime(p, (then, then))


def test_temp_names_say_whose_they_are(tmp_path: Path) -> None:
    tmp = Path(temp_beside(tmp_path / "sub" / "shard.bin"))
    assert tmp.parent == tmp_path / "sub" and is_temp_name(tmp.name)
    assert tmp.name.startswith(".shard.bin.") and f"-{os.getpid()}-" in tmp.name
    assert is_temp_name(".x.npy.abcd1234.tmp") and is_temp_name(".out.3f2a-1-x.staging")
    assert not is_temp_name("shard.tmp") and not is_temp_name(".staging.npy")


def test_temps_of_a_dead_writer_are_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    """While the writer runs nothing is removed; once it died without cleaning, both its
    temporary file and its staging folder go (before: nothing removed them, ever)."""
    child = subprocess.Popen(
        [sys.executable, "-c", LEAVE_TEMPS, str(tmp_path)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stdout.readline() == b"ready\n"
    leftovers = hidden(tmp_path)
    assert len(leftovers) == 2 and all(is_temp_name(n) for n in leftovers)
    assert remove_stale_temps(tmp_path) == []
    assert remove_stale_temps(tmp_path, max_age=0) == []  # a live pid beats any age
    child.communicate(b"")
    assert child.returncode == 0
    assert sorted(remove_stale_temps(tmp_path)) == [str(tmp_path / n) for n in leftovers]
    assert os.listdir(tmp_path) == []


def test_own_temps_are_kept(tmp_path: Path) -> None:
    tmp = temp_beside(tmp_path / "x.bin")
    with staged_output(tmp_path / "y.bin") as staging:
        assert remove_stale_temps(tmp_path, max_age=0) == []
        assert os.path.isdir(staging) and os.path.exists(tmp)


def test_uncheckable_temps_go_only_when_old(tmp_path: Path) -> None:
    """Another host's (or container's) temporaries and names of earlier versions are removed
    after ``max_age`` without change; a folder counts its newest entry; names that are not
    ours stay whatever their age."""
    other_host = tmp_path / ".data.bin.0badc0de-4242-abcd1234.tmp"
    legacy = tmp_path / ".data.idx.k3j4h5g6.tmp"
    staging = tmp_path / ".out.0badc0de-4242-abcd1234.staging"
    not_ours = [tmp_path / ".editor.swp", tmp_path / ".notes.tmp", tmp_path / "old.tmp"]
    for path in (other_host, legacy, *not_ours):
        path.write_bytes(b"x")
    (staging / "out").mkdir(parents=True)
    (staging / "out" / "shard_00000.npy").write_bytes(b"x")
    assert remove_stale_temps(tmp_path) == []
    for path in (other_host, legacy, staging, *not_ours):
        age(path, STALE_TEMP_AGE + 60)
    (staging / "out" / "shard_00001.npy").write_bytes(b"fresh")  # its writer is still busy
    removed = remove_stale_temps(tmp_path)
    assert sorted(removed) == sorted([str(other_host), str(legacy)])
    age(staging, STALE_TEMP_AGE + 60)
    assert remove_stale_temps(tmp_path) == [str(staging)]
    assert sorted(os.listdir(tmp_path)) == sorted(p.name for p in not_ours)


def test_a_folder_is_published_by_one_rename(tmp_path: Path) -> None:
    dst = tmp_path / "shards"
    with staged_output(dst) as staging:
        (Path(staging) / "shards").mkdir()
        (Path(staging) / "shards" / "shard_00000.npy").write_bytes(b"a")
        inode = os.stat(Path(staging) / "shards").st_ino
        assert not dst.exists()
    assert os.stat(dst).st_ino == inode and os.listdir(dst) == ["shard_00000.npy"]
    assert os.listdir(tmp_path) == ["shards"]


def test_files_are_published_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    moved: list[str] = []
    real = files._move_no_clobber
    monkeypatch.setattr(files, "_move_no_clobber", lambda s, d: (moved.append(d), real(s, d)))
    order = [tmp_path / "x.ds.index", tmp_path / "x.ds.metadata", tmp_path / "x.ds"]
    with staged_output(*order) as staging:
        for path in reversed(order):
            (Path(staging) / path.name).write_bytes(path.name.encode())
    assert moved == [str(p) for p in order]
    assert all(p.read_bytes() == p.name.encode() for p in order)
    assert sorted(os.listdir(tmp_path)) == sorted(p.name for p in order)


def test_a_failed_block_publishes_nothing(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"), staged_output(tmp_path / "a.bin") as staging:
        (Path(staging) / "a.bin").write_bytes(b"partial")
        raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_existing_outputs_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"old")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_bytes(b"old")
    for target in ("a.bin", "full"):
        refused = pytest.raises(ConfigError, match=f"{target} already exists.*remove it")
        with refused, staged_output(tmp_path / "new.idx", tmp_path / target):
            pass
    (tmp_path / "empty").mkdir()
    with staged_output(tmp_path / "empty") as staging:
        (Path(staging) / "empty").mkdir()
        (Path(staging) / "empty" / "s").write_bytes(b"new")
    assert (tmp_path / "a.bin").read_bytes() == b"old" and os.listdir(tmp_path / "empty") == ["s"]
    assert sorted(os.listdir(tmp_path)) == ["a.bin", "empty", "full"]


@pytest.mark.parametrize("hard_links", [True, False])
def test_an_output_appearing_meanwhile_is_not_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hard_links: bool
) -> None:
    """Another writer's file that appears while ours is written wins; what we had published
    is taken back (with or without hard links on the file system)."""
    if not hard_links:

        def no_links(src: str, dst: str, **_: object) -> None:
            raise OSError(errno.EPERM, "Operation not permitted")

        monkeypatch.setattr(os, "link", no_links)
    idx, bin_ = tmp_path / "d.idx", tmp_path / "d.bin"
    taken = pytest.raises(ConfigError, match=r"d\.bin appeared while this output was written")
    with taken, staged_output(idx, bin_) as staging:
        (Path(staging) / "d.idx").write_bytes(b"ours")
        (Path(staging) / "d.bin").write_bytes(b"ours")
        bin_.write_bytes(b"theirs")
    assert os.listdir(tmp_path) == ["d.bin"] and bin_.read_bytes() == b"theirs"
    with staged_output(tmp_path / "e.bin") as staging:
        (Path(staging) / "e.bin").write_bytes(b"ours")
    assert (tmp_path / "e.bin").read_bytes() == b"ours"


def test_unwritable_places_are_config_errors(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"x")
    refused = pytest.raises(ConfigError, match=r"file/sub: cannot write the output there")
    with refused, staged_output(tmp_path / "file" / "sub" / "a.bin"):
        pass
    mixed = pytest.raises(ValueError, match="one folder")
    with mixed, staged_output(tmp_path / "a" / "x.idx", tmp_path / "b" / "x.bin"):
        pass


def test_a_killed_writers_staging_is_removed_by_the_next_output(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", LEAVE_TEMPS, str(tmp_path)],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    assert child.wait() == 0 and len(hidden(tmp_path)) == 2
    with staged_output(tmp_path / "b.idx", tmp_path / "b.bin") as staging:
        for name in ("b.idx", "b.bin"):
            (Path(staging) / name).write_bytes(b"whole")
    assert sorted(os.listdir(tmp_path)) == ["b.bin", "b.idx"]
