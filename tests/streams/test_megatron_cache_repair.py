"""A damaged Megatron index cache is noticed and rebuilt, never served or crashed on.

Our own files carry their size, dtype, shape and sha256 in the description; megatron-core's
files get a digest sidecar the first time streamload uses them. Every start-up checks the
size, dtype and shape of each array; the digest is recomputed when a file's stat (size,
mtime, ctime, inode) differs from the one recorded (an in-place edit always changes ctime).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamload import load_config
from streamload.modes.megatron.stream import MegatronStream
from streamload.streams.interface import SampleStream
from streamload.util.files import temp_beside
from tests.streams.test_megatron import config_of, load, prefixes
from tests.streams.test_megatron_cache import FIXTURE

__all__ = ["prefixes"]  # the module fixture, re-exported for pytest

CASE = "gpt_e1_n"


def _stream(cfg: dict[str, Any]) -> MegatronStream:
    stream = SampleStream.from_config(load_config(cfg))
    assert isinstance(stream, MegatronStream)
    return stream


def _cfg(name: str, prefixes: dict[str, str], cache: Path) -> dict[str, Any]:
    cfg = config_of(name, prefixes)
    cfg["sampling"]["cache_dir"] = str(cache)
    return cfg


def _assert_golden(stream: MegatronStream, name: str) -> None:
    ids = np.arange(stream.pass_length or 0)
    np.testing.assert_array_equal(stream.read(0, ids)[0], load(name)[1]["text"][: ids.size])


def _quietly(cfg: dict[str, Any]) -> MegatronStream:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a sound cache loads without a word
        return _stream(cfg)


def _flip_in_place(path: Path) -> None:
    """Reverse the array's data bytes without changing the file's size or header."""
    array = np.load(path)
    data = np.ascontiguousarray(array[::-1]).tobytes()
    assert data != array.tobytes()
    with open(path, "r+b") as fh:
        fh.seek(path.stat().st_size - len(data))
        fh.write(data)


def _other_header(path: Path) -> None:
    array = np.load(path)
    np.save(path, array.astype(np.int64) if array.dtype != np.int64 else array.astype(np.int32))


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "missing": (lambda p: p.unlink(), "is missing"),
    "empty": (lambda p: p.write_bytes(b""), "0 bytes"),
    "truncated": (lambda p: p.write_bytes(p.read_bytes()[:-8]), "bytes, expected"),
    "garbage": (lambda p: p.write_bytes(b"not an npy file at all" * 4), "bytes, expected"),
    "other_dtype": (_other_header, "bytes, expected|dtype"),
    "changed_in_place": (_flip_in_place, "sha256"),
}


@pytest.mark.parametrize("array", ["document_index", "sample_index", "shuffle_index"])
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_cached_array_is_rebuilt(
    damage: str, array: str, prefixes: dict[str, str], tmp_path: Path
) -> None:
    cfg = _cfg(CASE, prefixes, tmp_path)
    _stream(cfg)
    (path,) = tmp_path.glob(f"*-streamload-megatron-ds0_{array}.npy")
    spoil, reason = DAMAGE[damage]
    spoil(path)
    with pytest.warns(UserWarning, match=rf"{path.name}.*({reason}).*rebuil"):
        rebuilt = _stream(cfg)
    _assert_golden(rebuilt, CASE)
    _assert_golden(_quietly(cfg), CASE)  # repaired for good: the next start-up is silent


def test_a_changed_blend_array_is_rebuilt(prefixes: dict[str, str], tmp_path: Path) -> None:
    cfg = _cfg("blend_train", prefixes, tmp_path)
    _stream(cfg)
    (path,) = tmp_path.glob("*-streamload-megatron-dataset_sample_index.npy")
    _flip_in_place(path)
    with pytest.warns(UserWarning, match=rf"{path.name}.*sha256"):
        _assert_golden(_stream(cfg), "blend_train")


@pytest.mark.parametrize("damage", ["garbage", "empty", "old_layout", "edited"])
def test_a_damaged_description_is_rebuilt(
    damage: str, prefixes: dict[str, str], tmp_path: Path
) -> None:
    cfg = _cfg(CASE, prefixes, tmp_path)
    _stream(cfg)
    (path,) = tmp_path.glob("*-streamload-megatron-description.json")
    body = json.loads(path.read_text())
    if damage == "garbage":
        path.write_text("{not json")
    elif damage == "empty":
        path.write_text("")
    elif damage == "old_layout":  # streamload before digests: a list of array names
        path.write_text(json.dumps(body | {"arrays": sorted(body["arrays"])}))
    else:
        path.write_text(json.dumps(body | {"seed": 99}))
    with pytest.warns(UserWarning, match=rf"{path.name}.*rebuil"):
        _assert_golden(_stream(cfg), CASE)
    _assert_golden(_quietly(cfg), CASE)


def test_a_copied_cache_is_verified_once_and_then_trusted(
    prefixes: dict[str, str], tmp_path: Path
) -> None:
    """A copy has other stats, so its digests are checked; the stats are then recorded."""
    _stream(_cfg(CASE, prefixes, tmp_path / "a"))
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    cfg = _cfg(CASE, prefixes, tmp_path / "b")
    _assert_golden(_quietly(cfg), CASE)
    description = next((tmp_path / "b").glob("*-streamload-megatron-description.json"))
    stamps = {k: v["stat"] for k, v in json.loads(description.read_text())["arrays"].items()}
    for name, stat in stamps.items():
        info = next((tmp_path / "b").glob(f"*-{name}.npy")).stat()
        assert stat == [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino]
    _assert_golden(_quietly(cfg), CASE)


# -- megatron-core's own cache files -------------------------------------------------------
MEGATRON_CASE = "gpt_e3_separate"  # the case the checked-in megatron-core files were built for


def _megatron_files(folder: Path) -> dict[str, Path]:
    return {
        name: next(folder.glob(f"*-GPTDataset-train-{name}.npy"))
        for name in ("document_index", "sample_index", "shuffle_index")
    }


def test_megatron_core_files_are_recorded_then_checked(
    prefixes: dict[str, str], tmp_path: Path
) -> None:
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True)
    cfg = _cfg(MEGATRON_CASE, prefixes, tmp_path)
    first = _quietly(cfg)
    assert first._files is not None and all("GPTDataset" in p for p in first._files.values())
    (sidecar,) = tmp_path.glob("*-GPTDataset-train-streamload-megatron-digests.json")
    assert set(json.loads(sidecar.read_text())) == {"document_index", "sample_index",
                                                    "shuffle_index"}  # fmt: skip
    second = _quietly(cfg)
    assert second._files == first._files
    path = _megatron_files(tmp_path)["shuffle_index"]
    _flip_in_place(path)
    with pytest.warns(UserWarning, match=rf"{path.name}.*sha256"):
        third = _stream(cfg)
    assert third._files is not None
    assert all("streamload-megatron" in p for p in third._files.values())  # our own build
    _assert_golden(third, MEGATRON_CASE)


@pytest.mark.parametrize("damage", ["missing", "empty", "truncated", "garbage", "other_dtype"])
def test_damaged_megatron_core_files_are_not_used(
    damage: str, prefixes: dict[str, str], tmp_path: Path
) -> None:
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True)
    path = _megatron_files(tmp_path)["sample_index"]
    DAMAGE[damage][0](path)
    if damage == "other_dtype":  # not the dtype these inputs give: another build's, skipped
        stream = _quietly(_cfg(MEGATRON_CASE, prefixes, tmp_path))
    else:
        with pytest.warns(UserWarning, match=rf"{path.name} is not a readable"):
            stream = _stream(_cfg(MEGATRON_CASE, prefixes, tmp_path))
    assert stream._files is not None
    assert all("streamload-megatron" in p for p in stream._files.values())
    _assert_golden(stream, MEGATRON_CASE)


# -- temporary files of killed builds ------------------------------------------------------
_KILLED_WRITER = """
import os, signal, sys
import numpy as np
from streamload.util.files import atomic_output
with atomic_output(sys.argv[1]) as tmp, open(tmp, "wb") as out:
    out.write(np.arange(1000, dtype=np.int64).tobytes()[:3000])
    out.flush()
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _killed_write(target: Path) -> Path:
    """Run a writer that is killed halfway through ``target``; return the temp it left."""
    env = os.environ | {"PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(target)], env=env)
    assert done.returncode == -9
    (left,) = target.parent.glob(f".{target.name}.*.tmp")
    return left


def test_temporary_files_of_a_killed_build_are_removed(
    prefixes: dict[str, str], tmp_path: Path
) -> None:
    """Only provably stale ones: a dead writer's of this host, or an old one of an earlier
    version; a live writer's and other files are kept (util.files.remove_stale_temps)."""
    cfg = _cfg(CASE, prefixes, tmp_path)
    stream = _stream(cfg)
    assert stream._files is not None
    target = Path(stream._files["ds0_shuffle_index"])
    for path in tmp_path.iterdir():
        path.unlink()
    killed = _killed_write(target)
    live = Path(temp_beside(target.with_name(target.name.replace("shuffle", "sample"))))
    past = time.time() - 2 * 24 * 3600
    legacy_old = tmp_path / f".{target.name}.abcd1234.tmp"
    legacy_young = tmp_path / f".{target.name}.wxyz5678.tmp"
    foreign = tmp_path / ".someone-elses-file"
    for path in (legacy_old, legacy_young, foreign):
        path.write_bytes(b"partial")
    os.utime(legacy_old, (past, past))
    os.utime(foreign, (past, past))
    _assert_golden(_stream(cfg), CASE)
    assert not killed.exists() and not legacy_old.exists()
    assert live.exists() and legacy_young.exists() and foreign.exists()
    assert not list(tmp_path.glob("*.lock"))
