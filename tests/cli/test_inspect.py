"""``streamload inspect``: one name per format, and EOS-delimited document counts for formats
without a document index."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from streamload.cli.main import main
from streamload.formats.registry import FORMAT_ALIASES, FORMATS, get_format
from streamload.formats.sniff import describe_shard
from streamload.tools.documents import count_documents, document_bounds
from tests.helpers.paths import DATA

KF = DATA / "kempnerforge"


def inspect_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["inspect", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_numpy_shards_are_called_numpy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """inspect used to say ``npy`` where configs, ``convert --to`` and ``tokenize --format``
    say ``numpy``."""
    shutil.copy(KF / "shard_00000.npy", tmp_path / "shard_00000.npy")
    assert inspect_json(capsys, str(tmp_path))["format"] == "numpy"
    assert "numpy" in FORMATS and "npy" not in FORMATS


def test_the_old_name_npy_is_still_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(KF / "shard_00000.npy", tmp_path / "shard_00000.npy")
    assert FORMAT_ALIASES == {"npy": "numpy"}
    assert get_format("npy") is get_format("numpy")
    report = inspect_json(capsys, str(tmp_path), "--format", "npy")
    assert report["format"] == "numpy"


def test_every_format_has_one_name_used_everywhere() -> None:
    """Registry keys are the names formats report, the config accepts and convert writes."""
    from streamload.config.source import ShardFormat
    from streamload.tools.convert import TARGETS

    for name, spec in FORMATS.items():
        assert spec.name == name
        assert ShardFormat(name).value == name  # the config accepts the reported name
    assert set(TARGETS) <= set(FORMATS)
    assert ShardFormat("npy").value == "numpy"  # the old spelling reads as the new one


def test_inspect_format_numpy_reads_shards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(KF / "shard_00001.npy", tmp_path / "shard_00001.npy")
    report = inspect_json(capsys, str(tmp_path), "--format", "numpy")
    assert (report["format"], report["num_tokens"]) == ("numpy", 5)


def test_eos_counts_documents_of_index_less_formats(capsys: pytest.CaptureFixture[str]) -> None:
    """KempnerForge NPY shards ``[7,8,9,0,12,13,0,22,…,26,0]`` and ``[32,0,40,41,0]``: 3 + 2
    documents ending in EOS 0; a raw file ``[7,8,9,0,12,13,0]``: 2."""
    paths = [str(KF / "shard_00000.npy"), str(KF / "shard_00001.npy")]
    report = inspect_json(capsys, *paths, "--eos", "0")
    assert report["num_documents"] == 5
    assert [s["num_documents"] for s in report["shards"]] == [3, 2]
    raw = inspect_json(capsys, str(KF / "shard_0.bin"), "--dtype", "uint16", "--eos", "0")
    assert raw["num_documents"] == 2


def test_without_eos_the_count_is_null_and_the_table_says_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = inspect_json(capsys, str(KF / "shard_00000.npy"))
    assert report["num_documents"] is None
    assert main(["inspect", str(KF / "shard_00000.npy")]) == 0
    out = capsys.readouterr().out
    assert "? documents" in out
    assert "numpy records no document boundaries; pass --eos ID to count" in out


def test_eos_from_a_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(KF / "shard_00000.npy", tmp_path / "shard_00000.npy")
    config = tmp_path / "data.toml"
    config.write_text(
        f'seq_len = 4\neos_token_id = 0\n[[sources]]\nname = "a"\npath = "{tmp_path}"\n'
    )
    report = inspect_json(capsys, str(tmp_path), "--config", str(config))
    assert report["num_documents"] == 3
    # --eos wins over the config's
    assert (
        inspect_json(capsys, str(tmp_path), "--config", str(config), "--eos", "13")["num_documents"]
        == 2
    )


def test_indexed_formats_ignore_eos(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A document index is the truth; --eos does not re-split it."""
    report = inspect_json(capsys, str(DATA / "datatrove"), "--eos", "9")
    assert report["num_documents"] == 4


@pytest.mark.parametrize("trailing", [True, False])
def test_count_matches_the_bounds_over_many_blocks(
    tmp_path: Path, trailing: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counting streams the shard in blocks; the count equals the documents that
    ``document_bounds`` splits, a trailing partial document included."""
    import fsspec

    from streamload.formats import open_shard
    from streamload.formats.base import ListedFile, ReadOptions

    monkeypatch.setattr("streamload.tools.documents.BLOCK_TOKENS", 1000)
    rng = np.random.default_rng(5)
    tokens = rng.integers(0, 20, size=10_007).astype("<u2")
    tokens[-1] = 3 if trailing else 0
    tokens.tofile(tmp_path / "x.bin")
    listed = ListedFile(str(tmp_path / "x.bin"), "x.bin", tokens.nbytes)
    info = describe_shard(
        fsspec.filesystem("file"), listed, "raw", ReadOptions(dtype="uint16"), frozenset()
    )
    shard = open_shard(info)
    want = len(document_bounds(shard, eos_token_id=0)) - 1
    assert count_documents(shard, 0) == want == int((tokens == 0).sum()) + trailing


def test_plot_with_eos_draws_the_lengths_of_a_numpy_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``inspect --plot`` with ``--eos`` on a NumPy folder raised ``ValueError`` (no indexed
    lengths): it plots the EOS-delimited documents and counts them as without ``--plot``."""
    pytest.importorskip("matplotlib")
    shutil.copy(KF / "shard_00000.npy", tmp_path / "shard_00000.npy")
    want = inspect_json(capsys, str(tmp_path), "--eos", "0")["num_documents"]
    out = tmp_path / "lengths.png"
    assert main(["inspect", str(tmp_path), "--eos", "0", "--plot", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.split("\nwrote")[0])["num_documents"] == want
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_plot_without_document_boundaries_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    shutil.copy(KF / "shard_00000.npy", tmp_path / "shard_00000.npy")
    assert main(["inspect", str(tmp_path), "--plot", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert "no document lengths to plot" in err and "--eos" in err and len(err.splitlines()) == 1
