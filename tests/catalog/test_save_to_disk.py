"""A ``datasets.save_to_disk`` folder listed against its ``state.json`` and
``dataset_info.json``: the files it lists, in its order, and the token column's feature."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from streamload.catalog.sources import describe_source
from streamload.config import SourceConfig
from streamload.errors import FormatError
from tests.helpers.paths import TESTS

SAVED = TESTS / "fixtures" / "hf" / "save_to_disk"
FIRST, SECOND = "data-00000-of-00002.arrow", "data-00001-of-00002.arrow"


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    return Path(shutil.copytree(SAVED, tmp_path / "saved"))


def names(folder: Path, **kw: str) -> list[str]:
    source = SourceConfig(name="s", path=str(folder), **kw)  # type: ignore[arg-type]
    return [Path(s.path).name for s in describe_source(source).shards]


def state(folder: Path, files: list[str]) -> None:
    text = json.loads((folder / "state.json").read_text())
    text["_data_files"] = [{"filename": name} for name in files]
    (folder / "state.json").write_text(json.dumps(text))


def test_the_files_come_in_state_order(saved: Path) -> None:
    assert names(saved) == [FIRST, SECOND]
    (saved / FIRST).rename(saved / "z.arrow")
    (saved / SECOND).rename(saved / "a.arrow")
    state(saved, ["z.arrow", "a.arrow"])
    assert names(saved) == ["z.arrow", "a.arrow"]  # not the name order


def test_missing_and_extra_files_are_named(saved: Path) -> None:
    (saved / SECOND).unlink()
    with pytest.raises(FormatError, match=rf"lists 2 Arrow files but the folder holds 1 \(missing"
                       rf" {SECOND}\)"):  # fmt: skip
        names(saved)
    shutil.copy(SAVED / SECOND, saved / SECOND)
    shutil.copy(SAVED / SECOND, saved / "data-00002-of-00003.arrow")
    with pytest.raises(FormatError, match=r"not listed there: data-00002-of-00003\.arrow\); the"):
        names(saved)


def test_a_state_without_data_files_is_refused(saved: Path) -> None:
    (saved / "state.json").write_text('{"_fingerprint": "x"}')
    with pytest.raises(FormatError, match=r"state\.json: expected a datasets state with a"):
        names(saved)
    (saved / "state.json").write_text('{"_data_files": [')
    with pytest.raises(FormatError, match=r"state\.json: not readable JSON"):
        names(saved)


def test_the_token_feature_must_be_a_list_of_integers(saved: Path) -> None:
    info = json.loads((saved / "dataset_info.json").read_text())
    info["features"]["input_ids"]["feature"]["dtype"] = "float32"
    (saved / "dataset_info.json").write_text(json.dumps(info))
    with pytest.raises(FormatError, match=r"dataset_info\.json: feature 'input_ids' is .*float32"
                       r".*; the token column must be a list of integers"):  # fmt: skip
        names(saved)
    assert names(saved, column="loss_mask") == [FIRST, SECOND]  # another column is checked


def test_a_listed_file_or_a_glob_is_not_checked(saved: Path) -> None:
    (saved / SECOND).unlink()
    assert names(saved / FIRST) == [FIRST]
    assert names(saved / "*.arrow") == [FIRST]


def test_datasets_cache_files_beside_a_saved_dataset_are_not_its_data(saved: Path) -> None:
    shutil.copy(SAVED / SECOND, saved / "cache-0123456789abcdef.arrow")  # a map() result
    assert names(saved) == [FIRST, SECOND]
