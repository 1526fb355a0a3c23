"""The command line: real files in tmp dirs, exit codes and outputs."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from streamload import SampleStream, load_config
from streamload.cli.main import main
from tests.helpers.paths import TESTS

DATA = TESTS / "data"


def write_config(folder: Path, **extra: object) -> Path:
    """A TOML config over NPY shards of known tokens (token = position + 1000)."""
    shards = folder / "shards"
    shards.mkdir()
    np.save(shards / "shard_00000.npy", np.arange(1000, 1300, dtype=np.uint16))
    np.save(shards / "shard_00001.npy", np.arange(1300, 1500, dtype=np.uint16))
    lines = ["seq_len = 8", "seed = 3", *(f"{k} = {v}" for k, v in extra.items())]
    lines += ["[[sources]]", 'name = "web"', 'path = "shards/"']
    config = folder / "data.toml"
    config.write_text("\n".join(lines) + "\n")
    return config


def test_samples_writes_global_samples(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    out = tmp_path / "s.npy"
    assert main(["samples", str(config), "--start", "3", "--count", "5", "--out", str(out)]) == 0
    got = np.load(out)
    stream = SampleStream.from_config(load_config(config))
    want, _ = stream.read(0, np.arange(3, 8))
    assert got.dtype == np.int64 and got.shape == (5, 9)
    np.testing.assert_array_equal(got, want)


def test_samples_per_rank_follow_the_partition(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    out = tmp_path / "r1.npy"
    args = ["samples", str(config), "--start", "0", "--count", "16", "--rank", "1"]
    assert main([*args, "--world-size", "2", "--batch-size", "3", "--out", str(out)]) == 0
    stream = SampleStream.from_config(load_config(config))
    want, _ = stream.read(0, np.array([3, 4, 5, 9, 10, 11, 15]))  # B = 6: rank 1 takes 3..5
    np.testing.assert_array_equal(np.load(out), want)


def test_samples_outside_the_pass_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    config = write_config(tmp_path)
    args = ["samples", str(config), "--start", "0", "--count", "10000", "--out", "x.npy"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "outside the pass" in err and len(err.splitlines()) == 1


def test_inspect_json_keys(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "mg"
    shutil.copytree(DATA / "dolma", folder)
    assert main(["inspect", str(folder / "part-0-00000.npy"), "--dtype", "uint16", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    keys = {"format", "dtype", "num_documents", "num_tokens", "trained_tokens", "shards"}
    assert set(report) == keys
    assert (report["format"], report["dtype"], report["num_documents"]) == ("dolma", "uint16", 3)
    assert report["num_tokens"] == 16
    assert set(report["shards"][0]) == {
        "path",
        "num_documents",
        "num_tokens",
        "trained_tokens",
        "loss_mask",
        "loss_mask_column",
    }
    assert report["shards"][0]["loss_mask"] is None
    assert report["trained_tokens"] == report["shards"][0]["trained_tokens"] == 16  # no mask


def test_docs_split_at_eos_without_an_index(capsys) -> None:
    path = DATA / "kempnerforge" / "shard_0.bin"
    args = ["docs", str(path), "--dtype", "uint16", "--eos", "0", "--start", "1"]
    assert main([*args, "--count", "5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"documents": [[12, 13, 0]]}


def test_validate_sound_and_unsound(tmp_path: Path, capsys) -> None:
    config = write_config(tmp_path)
    shards = str(config.parent / "shards")
    assert main(["validate", shards, "--vocab-size", "1500"]) == 0
    out = capsys.readouterr().out
    assert "sound" in out and "[[sources]]" in out
    assert main(["validate", shards, "--vocab-size", "1400", "--eos", "7"]) == 1
    out = capsys.readouterr().out
    assert "token ids reach 1499; expected < vocab_size 1400" in out
    assert "no EOS token 7" in out


def test_validate_reports_a_truncated_file(tmp_path: Path, capsys) -> None:
    path = tmp_path / "a.npy"
    np.save(path, np.arange(100, dtype=np.uint16))
    path.write_bytes(path.read_bytes()[:-10])
    assert main(["validate", str(path)]) == 1
    assert "truncated" in capsys.readouterr().out


@pytest.mark.parametrize("target", ["megatron", "dolma", "datatrove", "numpy"])
def test_convert_round_trips_documents(tmp_path: Path, target: str, capsys) -> None:
    source = DATA / "dolma" / "part-0-00000.npy"
    dst = {"megatron": "out", "dolma": "out.npy", "datatrove": "out.ds", "numpy": "outdir"}
    out = tmp_path / dst[target]
    assert main(["convert", str(source), str(out), "--to", target, "--source-dtype", "uint16"]) == 0
    capsys.readouterr()
    assert (
        main(["docs", str(out), "--dtype", "uint16", "--eos", "0", "--count", "10", "--json"]) == 0
    )
    documents = json.loads(capsys.readouterr().out)["documents"]
    assert documents == [[1, 12, 13, 0], [1, 22, 23, 24, 25, 26, 0], [1, 7, 8, 9, 0]]


def test_plan_reports_realized_shares(tmp_path: Path, capsys) -> None:
    folder = tmp_path
    for name, n in (("web", 900), ("code", 500)):
        (folder / name).mkdir()
        np.save(folder / name / "s.npy", np.arange(n, dtype=np.uint16))
    config = folder / "mix.toml"
    config.write_text(
        "seq_len = 4\nglobal_batch_size = 10\n"
        '[[sources]]\nname = "web"\npath = "web/"\nweight = 0.7\n'
        '[[sources]]\nname = "code"\npath = "code/"\nweight = 0.3\n'
        "[[schedule]]\nstart_step = 50\nweights = { web = 0.2, code = 0.8 }\n"
    )
    assert main(["plan", str(config), "--steps", "100", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    first, second = report["phases"]
    assert first["realized"] == {"web": 0.7, "code": 0.3} and first["end_step"] == 50
    assert second["realized"] == {"web": 0.2, "code": 0.8}
    assert report["sources"]["code"]["samples"] == 50 * 3 + 50 * 8
    assert report["sources"]["code"]["epochs_completed"] == (50 * 3 + 50 * 8) // 124


def test_demo_resumes_exactly(tmp_path: Path, capsys) -> None:
    assert main(["demo", "--dir", str(tmp_path), "--num-workers", "2"]) == 0
    assert "exact resume OK" in capsys.readouterr().out


def test_merge_megatron_is_byte_identical_to_add_index(tmp_path: Path) -> None:
    tiny = str(DATA / "megatron" / "tiny_text_document")
    assert main(["merge", tiny, tiny, str(tmp_path / "m")]) == 0
    for suffix in (".bin", ".idx"):
        want = (DATA / "megatron" / f"merged{suffix}").read_bytes()
        assert (tmp_path / f"m{suffix}").read_bytes() == want


def test_merge_datatrove_keeps_every_document(tmp_path: Path, capsys) -> None:
    ds = str(DATA / "datatrove" / "tiny_00000_unshuffled.ds")
    assert main(["merge", ds, ds, str(tmp_path / "d.ds")]) == 0
    capsys.readouterr()
    assert main(["docs", str(tmp_path / "d.ds"), "--count", "10", "--json"]) == 0
    docs = [[7, 8, 9, 0], [12, 13, 0], [22, 23, 24, 25, 26, 0], [32, 0]]
    assert json.loads(capsys.readouterr().out) == {"documents": docs + docs}


def test_index_writes_the_modalities_raw_index(tmp_path: Path) -> None:
    jsonl = tmp_path / "docs.jsonl"
    shutil.copy(DATA / "modalities" / "docs.jsonl", jsonl)
    assert main(["index", str(jsonl)]) == 0
    assert (tmp_path / "docs.idx").read_bytes() == (DATA / "modalities" / "docs.idx").read_bytes()


def test_convert_to_modalities_is_byte_identical(tmp_path: Path) -> None:
    out = tmp_path / "docs.pbin"
    assert main(["convert", str(DATA / "datatrove" / "tiny_00000_unshuffled.ds"), str(out),
                 "--to", "modalities"]) == 0  # fmt: skip
    assert out.read_bytes() == (DATA / "modalities" / "docs.pbin").read_bytes()


def test_written_files_are_readable_by_others(tmp_path: Path) -> None:
    """Temporary outputs are 0600; finished datasets get the usual umask permissions."""
    source = DATA / "dolma" / "part-0-00000.npy"
    out = tmp_path / "m"
    assert (
        main(["convert", str(source), str(out), "--to", "megatron", "--source-dtype", "uint16"])
        == 0
    )
    mask = os.umask(0)
    os.umask(mask)
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"m{suffix}").stat().st_mode & 0o777 == 0o666 & ~mask


def test_rank_positions_drop_the_partial_optimizer_step() -> None:
    """``samples --rank`` leaves out what the loader never delivers: with 2 accumulation
    steps of global batches of 4 (2 ranks x 2), a pass of 20 samples delivers 2 whole
    steps (16 samples); the 4 samples of the partial third step are dropped."""
    from streamload.cli.samples import rank_positions

    rank1 = rank_positions(0, 20, 1, 2, 2, 20, grad_accum_steps=2).tolist()
    assert rank1 == [2, 3, 6, 7, 10, 11, 14, 15]
    assert rank_positions(0, 20, 1, 2, 2, 20).tolist() == [2, 3, 6, 7, 10, 11, 14, 15, 18, 19]
