"""``streamload convert`` to MDS, LitData, a folder of Parquet files and a ``save_to_disk``
folder (``--to arrow``), and back.

Every format streamload writes is converted to each new target and back: the token files
written back equal the originals byte for byte, and the documents are the same. The command
line prints what it wrote, refuses options of other targets, existing outputs and bad
values with one line, merges each new format, and ``inspect``/``docs``/``validate`` read
what it wrote; loss masks travel with the data.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamload.cli.main import main
from streamload.tools.convert import TARGETS, WriteOptions, convert, open_output, open_writer
from streamload.tools.convert_targets import parse_size
from streamload.tools.masks import mask_reader
from tests.helpers.extras import needs
from tests.tools.test_convert_parquet import (
    DESTINATIONS,
    catalog_of,
    documents_of,
    to_format,
    write_format,
)

NEW = ("mds", "litdata", "parquet", "arrow")
"""The new targets (parquet: a folder of Hub-sized files; arrow: a save_to_disk folder)."""
OLD = [f for f in TARGETS if f not in ("mds", "litdata")]


@settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lengths=st.lists(st.integers(1, 40), min_size=1, max_size=20),
    wide=st.booleans(),
    seed=st.integers(0, 100),
)
@pytest.mark.parametrize("target", NEW)
@pytest.mark.parametrize("fmt", OLD)
def test_every_format_to_each_new_target_and_back_is_identical(
    tmp_path_factory: pytest.TempPathFactory,
    fmt: str,
    target: str,
    lengths: list[int],
    wide: bool,
    seed: int,
) -> None:
    """Documents end in EOS 0 (LitData keeps none; they are found again at EOS); the token
    files written back equal the originals byte for byte, and so do the documents."""
    dtype = "uint16" if not wide else "uint32" if fmt in ("datatrove", "modalities") else "int32"
    headerless = dtype if fmt == "dolma" else "auto"
    rng = np.random.default_rng(seed)
    docs = [[*rng.integers(1, 60000, n - 1).tolist(), 0] for n in lengths]
    root = tmp_path_factory.mktemp(f"{fmt}-{target}")
    (root / "a").mkdir()
    (root / "b").mkdir()
    source = catalog_of(write_format(root / "a", fmt, docs, dtype), headerless)
    middle_path = root / "mid"
    writer = open_output(source, target, str(middle_path), options=_small(target))
    convert(source, writer, eos_token_id=0)
    middle = catalog_of(middle_path)
    assert middle.shards[0].dtype == np.dtype(dtype).str
    assert documents_of(middle, 0) == docs
    back = catalog_of(to_format(middle, fmt, root / "b" / DESTINATIONS[fmt]), headerless)
    assert documents_of(back) == docs
    for a, b in zip(source.shards, back.shards, strict=True):
        assert Path(a.path).read_bytes() == Path(b.path).read_bytes()


def _small(target: str) -> WriteOptions:
    """Options that cut a small corpus into several files."""
    if target == "mds":
        return WriteOptions(size_limit=400)
    if target in ("parquet", "arrow"):
        return WriteOptions(max_file_bytes=100)
    return WriteOptions(chunk_bytes=100)  # up to 20 chunks: chunk-0-10.bin and on


def test_cli_writes_each_target_and_reads_it_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    needs("zstandard", "mds")  # the MDS target is written zstd-compressed
    src = write_format(tmp_path, "megatron", [[5, 6, 0], [7, 0], [8, 9, 10, 0]], "uint16")
    args = ["convert", str(src)]
    assert main([*args, str(tmp_path / "m"), "--to", "mds", "--compression", "zstd"]) == 0
    assert f"as mds (uint16): {tmp_path / 'm'}/ (1 MDS shard)" in capsys.readouterr().out
    assert [p.name for p in sorted((tmp_path / "m").iterdir())] == [
        "index.json",
        "shard.00000.mds.zstd",
    ]
    assert main([*args, str(tmp_path / "l"), "--to", "litdata", "--chunk-bytes", "10"]) == 0
    assert f"as litdata (uint16): {tmp_path / 'l'}/ (2 chunks)" in capsys.readouterr().out
    assert main([*args, str(tmp_path / "p"), "--to", "parquet", "--max-file-size", "18B"]) == 0
    files = [tmp_path / "p" / f"train-0000{i}-of-00002.parquet" for i in range(2)]
    assert f"as parquet (uint16): {files[0]}, {files[1]}" in capsys.readouterr().out
    assert main([*args, str(tmp_path / "a"), "--to", "arrow", "--max-file-size", "18B"]) == 0
    files = [tmp_path / "a" / f"data-0000{i}-of-00002.arrow" for i in range(2)]
    names = [*files, tmp_path / "a" / "dataset_info.json", tmp_path / "a" / "state.json"]
    assert f"as arrow (uint16): {', '.join(map(str, names))}" in capsys.readouterr().out
    for out in ("m", "l", "p", "a"):
        assert main(["docs", str(tmp_path / out), "--start", "0", "--count", "3", "--json",
                     "--eos", "0"]) == 0  # fmt: skip
        shown = json.loads(capsys.readouterr().out)["documents"]
        assert shown == [[5, 6, 0], [7, 0], [8, 9, 10, 0]]
        assert main(["validate", str(tmp_path / out), "--eos", "0"]) == 0
        assert "sound: 9 tokens" in capsys.readouterr().out
        assert main(["inspect", str(tmp_path / out), "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        target = {"m": "mds", "l": "litdata", "p": "parquet", "a": "arrow"}[out]
        assert (report["format"], report["num_tokens"]) == (target, 9)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--to", "litdata", "--compression", "zstd"], "--compression applies to --to mds only"),
        (["--to", "mds", "--chunk-bytes", "1MB"], "--chunk-bytes applies to --to litdata only"),
        (["--to", "mds", "--max-file-size", "1MB"], "--max-file-size applies to a folder of"),
        (["--to", "mds", "--compression", "gz"], "compression 'gz' is not written"),
        (["--to", "mds", "--size-limit", "lots"], "--size-limit 'lots' is not a size in bytes"),
        (["--to", "mds", "--dtype", "float32"], "--dtype float32 cannot hold token ids"),
        (["--to", "litdata", "--dtype", "nope"], "--dtype 'nope' is not a numpy dtype"),
        (["--to", "arrow", "--size-limit", "1MB"], "--size-limit applies to --to mds only"),
    ],
)
def test_bad_options_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    src = write_format(tmp_path, "megatron", [[5, 6, 0]], "uint16")
    assert main(["convert", str(src), str(tmp_path / "out"), *extra]) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_parquet_file_takes_no_max_file_size_and_outputs_are_never_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write_format(tmp_path, "megatron", [[5, 6, 0]], "uint16")
    one = str(tmp_path / "one.parquet")
    assert main(["convert", str(src), one, "--to", "parquet", "--max-file-size", "1MB"]) != 0
    err = capsys.readouterr().err
    assert "--max-file-size applies to a folder of --to parquet or --to arrow only" in err
    for target in NEW:
        (tmp_path / target).mkdir()
        (tmp_path / target / "keep").write_text("x")
        assert main(["convert", str(src), str(tmp_path / target), "--to", target]) != 0
        assert "already exists" in capsys.readouterr().err
        assert [p.name for p in (tmp_path / target).iterdir()] == ["keep"]


def test_an_arrow_folder_is_not_named_like_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write_format(tmp_path, "megatron", [[5, 6, 0]], "uint16")
    assert main(["convert", str(src), str(tmp_path / "out.arrow"), "--to", "arrow"]) != 0
    assert "--to arrow writes a save_to_disk folder, not an .arrow file" in capsys.readouterr().err
    assert not (tmp_path / "out.arrow").exists()


def test_zstd_without_zstandard_is_refused_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    src = write_format(tmp_path, "megatron", [[5, 6, 0]], "uint16")
    monkeypatch.setitem(sys.modules, "zstandard", None)
    assert (
        main(["convert", str(src), str(tmp_path / "m"), "--to", "mds", "--compression", "zstd"])
        != 0
    )
    assert "needs the zstandard package: pip install 'streamload[mds]'" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_an_empty_document_names_the_source_for_mds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write_format(tmp_path, "megatron", [[5, 6, 0], [], [7, 0]], "uint16")
    assert main(["convert", str(src), str(tmp_path / "m"), "--to", "mds"]) != 0
    err = capsys.readouterr().err
    assert f"{src}.bin: document 1: an empty document cannot be an MDS sample" in err
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("target", NEW)
def test_merge_each_new_format(tmp_path: Path, target: str) -> None:
    src = write_format(tmp_path, "megatron", [[5, 6, 0], [7, 0]], "uint16")
    assert main(["convert", str(src), str(tmp_path / "a"), "--to", target]) == 0
    assert main(["merge", str(tmp_path / "a"), str(tmp_path / "a"), str(tmp_path / "ab")]) == 0
    merged = catalog_of(tmp_path / "ab")
    assert merged.shards[0].format == target
    assert documents_of(merged, 0) == [[5, 6, 0], [7, 0]] * 2


@pytest.mark.parametrize("target", NEW)
def test_loss_masks_travel_into_each_new_target(tmp_path: Path, target: str) -> None:
    """A datatrove source with a ``.ds.loss``: the output's files have their masks beside
    them, read back by the catalog, one flag per token, in order."""
    from streamload.formats.datatrove.datatrove import DatatroveWriter

    docs = [[5, 6, 0], [7, 0], [8, 9, 10, 0]]
    flags = [[0, 1, 1], [1, 0], [0, 0, 1, 1]]
    with DatatroveWriter(tmp_path / "src.ds", None, 2, save_loss_metadata=True) as writer:
        for doc, flag in zip(docs, flags, strict=True):
            writer.add_document(np.array(doc, np.uint16), loss_mask=np.array(flag, bool))
    source = catalog_of(tmp_path / "src.ds")
    out = tmp_path / "out"
    convert(source, open_output(source, target, str(out), options=_small(target)))
    masked = catalog_of(out)
    assert all(info.loss_mask is not None for info in masked.shards)
    got = [int(f) for info in masked.shards for f in _flags(info)]
    assert got == [f for flag in flags for f in flag]
    if target in ("arrow", "parquet"):  # in the labels_mask column, no mask file beside
        assert not [p for p in out.iterdir() if p.suffix == ".loss"]


def _flags(info: Any) -> np.ndarray:
    shard = mask_reader(info)
    return np.asarray(shard.tokens(0, info.num_tokens))


@pytest.mark.parametrize("target", [t for t in NEW if t != "arrow"])
def test_an_arrow_folder_with_masks_goes_through_each_target_and_back(
    tmp_path: Path, target: str
) -> None:
    """The ``labels_mask`` column travels into each new target's masks and back into the
    column: the folder written back is the same, byte for byte (the fingerprint too)."""
    docs = [[5, 6, 0], [7, 0], [8, 9, 10, 0]]
    flags = [[0, 1, 1], [1, 0], [0, 0, 1, 1]]
    with open_writer("arrow", str(tmp_path / "a"), np.dtype("int32"), masks=True) as writer:
        for doc, flag in zip(docs, flags, strict=True):
            writer.add_document(np.array(doc, np.int32), loss_mask=np.array(flag, np.uint8))
    source = catalog_of(tmp_path / "a")
    middle = tmp_path / "mid"
    convert(
        source, open_output(source, target, str(middle), options=_small(target)), eos_token_id=0
    )
    back = catalog_of(middle)
    convert(back, open_output(back, "arrow", str(tmp_path / "b")), eos_token_id=0)
    for name in [p.name for p in (tmp_path / "a").iterdir()]:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_sizes_parse_like_the_tools() -> None:
    assert parse_size("64MB", "--x") == 64_000_000  # litdata, datasets: decimal
    assert parse_size("64MiB", "--x") == 1 << 26
    assert parse_size("67108864", "--x") == 1 << 26
    assert parse_size(" 5 kb ", "--x") == 5000
