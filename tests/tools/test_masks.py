"""Loss masks through ``convert``, ``merge`` and ``validate``: carried into every target
(datatrove's own ``.ds.loss``, the mask file beside any other token file), refused when only
some inputs have one, dropped on request, checked for length and values."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import streamload
from streamload.catalog.sources import describe_source
from streamload.cli.main import main
from streamload.config import SourceConfig
from streamload.errors import ConfigError
from streamload.formats.datatrove.datatrove import DatatroveWriter
from streamload.formats.registry import open_shard
from streamload.tools import convert as convert_module
from streamload.tools.convert import convert, open_output
from streamload.tools.documents import document_bounds, iter_documents
from streamload.tools.masks import mask_reader
from tests.tools.test_convert import DESTINATIONS

DATA = Path(__file__).resolve().parents[1] / "data" / "datatrove_loss"
DS = "loss_00000_unshuffled.ds"
MASK_FILES = {
    "megatron": ["out.bin.loss"],
    "modalities": ["out.pbin.loss"],
    "dolma": ["out.npy.loss"],
    "datatrove": ["out.ds.loss"],
    "numpy": ["out/shard_00000.npy.loss", "out/shard_00001.npy.loss", "out/shard_00002.npy.loss"],
}
"""The mask files each target gets (NumPy: one per shard of 10 tokens)."""


@pytest.fixture
def fixture_copy(tmp_path: Path) -> Path:
    """datatrove's own files (with ``.ds.loss``) alone in a folder."""
    folder = tmp_path / "src"
    folder.mkdir()
    for suffix in ("", ".index", ".metadata", ".loss"):
        shutil.copy(DATA / f"{DS}{suffix}", folder / f"{DS}{suffix}")
    return folder


def documents_and_masks(path: Path | str, dtype: str = "auto") -> tuple[list, list, int]:
    """Every document and its mask, through the catalog (which finds the masks); and how
    many shards have a mask."""
    source = SourceConfig(name="t", path=str(path), format="auto", dtype=dtype)
    docs, masks, masked = [], [], 0
    for info in describe_source(source, vocab_size=300).shards:
        masked += info.loss_mask is not None
        shard = open_shard(info)
        bounds = document_bounds(shard, 0)
        docs += [d.tolist() for d in iter_documents(shard, bounds)]
        masks += [np.asarray(m).tolist() for m in iter_documents(mask_reader(info), bounds)]
    return docs, masks, masked


def flat(rows: list[list[int]]) -> list[int]:
    return [x for row in rows for x in row]


def convert_cli(src: Path, dst: Path, fmt: str, *extra: str) -> int:
    return main(["convert", str(src), str(dst), "--to", fmt, "--dtype", "uint16", *extra])


@pytest.mark.parametrize("fmt", sorted(DESTINATIONS))
def test_convert_carries_datatrove_masks_into_every_target(
    tmp_path: Path, fixture_copy: Path, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(convert_module, "NUMPY_SHARD_TOKENS", 10)  # masks cut with shards
    want = documents_and_masks(fixture_copy)
    out = tmp_path / "dst"
    out.mkdir()
    assert convert_cli(fixture_copy, out / DESTINATIONS[fmt], fmt) == 0
    assert sorted(
        str(p.relative_to(out)) for p in out.rglob("*") if p.name.endswith(".loss")
    ) == sorted(MASK_FILES[fmt])
    dtype = "uint16" if fmt == "numpy" else "auto"
    docs, masks, masked = documents_and_masks(out / DESTINATIONS[fmt], dtype)
    if fmt == "numpy":  # one token stream cut into shards: compare the streams
        assert (flat(docs), flat(masks)) == (flat(want[0]), flat(want[1]))
        assert masked == 3
    else:
        assert (docs, masks, masked) == want


def test_datatrove_round_trip_through_numpy_is_byte_identical(
    tmp_path: Path, fixture_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(convert_module, "NUMPY_SHARD_TOKENS", 7)
    assert convert_cli(fixture_copy, tmp_path / "np", "numpy") == 0
    # documents come back from the EOS (the cropped one has none: it joins the next)
    back = tmp_path / "back" / DS
    args = ["--eos", "0", "--tokenizer-name", "tok300.json"]
    assert convert_cli(tmp_path / "np", back, "datatrove", *args) == 0
    for suffix in ("", ".loss", ".metadata"):
        assert Path(f"{back}{suffix}").read_bytes() == (DATA / f"{DS}{suffix}").read_bytes()


def test_olmo_core_names_give_olmo_core_mask_names(tmp_path: Path, fixture_copy: Path) -> None:
    out = tmp_path / "olmo"
    out.mkdir()
    assert convert_cli(fixture_copy, out / "token_ids_part_0000.npy", "dolma") == 0
    assert sorted(os.listdir(out)) == [
        "labels_mask_part_0000.npy",
        "token_ids_part_0000.csv.gz",
        "token_ids_part_0000.npy",
    ]
    mask = np.fromfile(out / "labels_mask_part_0000.npy", dtype=np.bool_)  # OLMo-core's read
    assert mask.tolist() == [bool(b) for b in (DATA / f"{DS}.loss").read_bytes()]
    assert documents_and_masks(out)[1:] == documents_and_masks(fixture_copy)[1:]


def test_drop_masks_writes_none(tmp_path: Path, fixture_copy: Path) -> None:
    assert convert_cli(fixture_copy, tmp_path / "o.npy", "dolma", "--drop-masks") == 0
    assert sorted(os.listdir(tmp_path)) == ["o.csv.gz", "o.npy", "src"]


def test_an_interrupted_masked_convert_publishes_nothing(
    tmp_path: Path, fixture_copy: Path
) -> None:
    catalog = describe_source(SourceConfig(name="t", path=(str(fixture_copy),)))
    writer = open_output(catalog, "dolma", str(tmp_path / "dst" / "o.npy"))
    assert writer.masks

    def fail(documents: int, tokens: int) -> None:
        if documents == 3:
            raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        convert(catalog, writer, progress=fail)
    assert os.listdir(tmp_path / "dst") == []


def write_datatrove(path: Path, docs: list[list[int]], masks: list[list[int]] | None) -> None:
    with DatatroveWriter(path, "tok300.json", 2, save_loss_metadata=masks is not None) as w:
        for i, doc in enumerate(docs):
            w.add_document(np.array(doc), loss_mask=None if masks is None else masks[i])


def test_merge_concatenates_masks_and_refuses_a_mix(tmp_path: Path, fixture_copy: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    write_datatrove(bare / "b.ds", [[5, 6, 0], [7, 0]], None)
    src = str(fixture_copy / DS)
    want_docs, want_masks, _ = documents_and_masks(fixture_copy)

    assert main(["merge", src, src, str(tmp_path / "two.ds")]) == 0
    docs, masks, _ = documents_and_masks(tmp_path / "two.ds")
    assert (docs, masks) == (want_docs * 2, want_masks * 2)

    with pytest.raises(ConfigError, match=r"1 of 2 input files have a loss mask but .*b\.ds has"):
        wanted = describe_source(SourceConfig(name="m", path=(src, str(bare / "b.ds"))))
        open_output(wanted, "datatrove", str(tmp_path / "never.ds"))
    assert main(["merge", src, str(bare / "b.ds"), str(tmp_path / "mix.ds")]) == 2
    assert not (tmp_path / "mix.ds").exists()

    assert main(["merge", src, str(bare / "b.ds"), str(tmp_path / "m.ds"), "--assume-trained"]) == 0
    docs, masks, _ = documents_and_masks(tmp_path / "m.ds")
    assert (docs, masks) == ([*want_docs, [5, 6, 0], [7, 0]], [*want_masks, [1, 1, 1], [1, 1]])

    assert main(["merge", src, str(bare / "b.ds"), str(tmp_path / "d.ds"), "--drop-masks"]) == 0
    assert not Path(f"{tmp_path / 'd.ds'}.loss").exists()


def test_merge_megatron_merges_masks(tmp_path: Path, fixture_copy: Path) -> None:
    parts = tmp_path / "parts"
    parts.mkdir()
    for name in ("a", "b"):
        assert convert_cli(fixture_copy, parts / name, "megatron") == 0
    out = tmp_path / "merged"
    assert main(["merge", str(parts / "a"), str(parts / "b"), str(out)]) == 0
    assert sorted(os.listdir(tmp_path)) == [
        "merged.bin",
        "merged.bin.loss",
        "merged.idx",
        "parts",
        "src",
    ]
    want_docs, want_masks, _ = documents_and_masks(fixture_copy)
    assert documents_and_masks(f"{out}.bin")[:2] == (want_docs * 2, want_masks * 2)
    # without masks: megatron's own merge, as before
    os.remove(parts / "b.bin.loss")
    assert main(["merge", str(parts / "a"), str(parts / "b"), str(tmp_path / "m2")]) == 2
    assert main(["merge", str(parts / "b"), str(parts / "b"), str(tmp_path / "m3")]) == 0
    assert not (tmp_path / "m3.bin.loss").exists()


def test_validate_checks_mask_length_and_values(
    tmp_path: Path, fixture_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(fixture_copy)]) == 0
    assert "sound: 26 tokens in 1 files (1 with a loss mask)" in capsys.readouterr().out
    loss = fixture_copy / f"{DS}.loss"
    loss.write_bytes(loss.read_bytes()[:-1])
    assert main(["validate", str(fixture_copy)]) == 1
    out = capsys.readouterr().out
    assert f"{loss}: 25 bytes" in out and "26 tokens" in out  # the size found and expected
    loss.write_bytes(b"\x01\x02" + b"\x01" * 23 + b"\x07")
    assert main(["validate", str(fixture_copy)]) == 1
    out = capsys.readouterr().out
    assert f"loss mask {loss}: 2 bytes are neither 0" in out and "first at byte 1 (2)" in out


@pytest.mark.parametrize("fmt", ["megatron", "numpy"])
def test_loader_labels_over_a_converted_output_follow_its_mask_files(
    tmp_path: Path, fixture_copy: Path, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Concat mode over the converted output: labels are the next tokens, -100 where the
    mask file's byte of that token is 0 (reference from the files' bytes alone)."""
    monkeypatch.setattr(convert_module, "NUMPY_SHARD_TOKENS", 9)
    out = tmp_path / "dst"
    out.mkdir()
    assert convert_cli(fixture_copy, out / DESTINATIONS[fmt], fmt) == 0
    tokens = np.fromfile(fixture_copy / DS, dtype="<u2").astype(np.int64)
    mask = np.concatenate([np.fromfile(p, dtype="u1") for p in sorted(out.rglob("*.loss"))])
    assert mask.tolist() == list((fixture_copy / f"{DS}.loss").read_bytes())
    seq_len = 4
    source = {"name": "c", "path": str(out / DESTINATIONS[fmt]), "dtype": "uint16"}
    cfg = {"seq_len": seq_len, "seed": 5, "sources": [source]}
    if fmt == "numpy":
        cfg["sampling"] = {"cross_shard": True}
    loader = streamload.build_loader(cfg, batch_size=2)
    starts_of = streamload.SampleStream.from_config(streamload.load_config(cfg)).window_starts
    rows = 0
    for batch in loader:
        for row, start in enumerate(starts_of(0, batch["sample_index"].numpy()).tolist()):
            nxt = slice(start + 1, start + seq_len + 1)
            expected = np.where(mask[nxt] != 0, tokens[nxt], -100)
            assert torch.equal(batch["labels"][row], torch.from_numpy(expected))
            rows += 1
    assert rows == (len(tokens) - 1) // seq_len // 2 * 2
