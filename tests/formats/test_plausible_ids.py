"""A headerless file read at the wrong width is refused without ``vocab_size`` (issue 36,
item 8): a uint16 file read as uint32 reads ids no vocabulary has; the message names the file
and the dtype that fits; legitimate wide corpora still pass."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from streamload.catalog.sources import SourceCatalog, describe_source
from streamload.cli.main import main
from streamload.config import SourceConfig
from streamload.errors import FormatError
from streamload.formats import open_shard
from streamload.formats.numpy.plausible_ids import (
    MAX_PLAUSIBLE_ID,
    SAMPLE_TOKENS,
    fitting_dtype,
    implausible_ids,
)
from tests.helpers.catalog import rewrote_in_place

TATM_YAML = "name: tokenized\ntokenized_info:\n  dtype: {dtype}\n  file_extension: bin\n"


def describe(path: Path, **kw: object) -> SourceCatalog:
    vocab_size = kw.pop("vocab_size", None)
    return describe_source(SourceConfig(name="t", path=str(path), **kw), vocab_size)  # type: ignore[arg-type]


def gpt2_like(n: int, dtype: str, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 50_257, size=n).astype(dtype)


def test_uint16_read_as_uint32_is_refused_naming_the_dtype_that_fits(tmp_path: Path) -> None:
    tokens = gpt2_like(20_000, "<u2")
    tokens.tofile(tmp_path / "a.bin")
    as_u32 = tokens.view("<u4")
    sampled = np.concatenate([as_u32[:SAMPLE_TOKENS], as_u32[-SAMPLE_TOKENS:]])
    want = (
        f"{tmp_path / 'a.bin'}: reads as uint32 ids up to {int(sampled.max()):,}, more than "
        "any vocabulary (2**21); the file looks like uint16: set dtype = 'uint16' (if ids this "
        "large are real, set vocab_size)"
    )
    with pytest.raises(FormatError) as err:
        describe(tmp_path, dtype="uint32")
    assert str(err.value) == want
    # the right dtype reads it; with vocab_size set, ids are checked where they are read
    assert open_shard(describe(tmp_path, dtype="uint16").shards[0]).tokens(0, 20_000).tolist() == (
        tokens.tolist()
    )
    assert describe(tmp_path, dtype="uint32", vocab_size=50_257).num_tokens == 10_000


@pytest.mark.parametrize(
    ("true", "read", "fit"),
    [("<u2", "int64", "uint16"), ("<u4", "int64", "uint32"), ("<u2", "int32", "uint16")],
)
def test_every_too_wide_reading_names_the_width(
    tmp_path: Path, true: str, read: str, fit: str
) -> None:
    gpt2_like(8_000, true, seed=1).tofile(tmp_path / "a.bin")
    with pytest.raises(FormatError, match=rf"reads as {read} ids .* looks like {fit}: set dtype"):
        describe(tmp_path, dtype=read)


@pytest.mark.parametrize("dtype", ["int64", "uint64", "uint32", "int32", "uint16"])
def test_legitimate_corpora_pass(tmp_path: Path, dtype: str) -> None:
    top = min(MAX_PLAUSIBLE_ID, int(np.iinfo(dtype).max) + 1)
    tokens = np.concatenate([[0, top - 1], gpt2_like(30_000, "int64")]).astype(dtype)
    tokens.tofile(tmp_path / "a.bin")
    catalog = describe(tmp_path, dtype=dtype)
    assert open_shard(catalog.shards[0]).tokens(0, tokens.size).tolist() == tokens.tolist()


def test_only_a_bounded_sample_is_read(tmp_path: Path) -> None:
    """The check reads each end of the file, never the whole: ids out of range in the middle
    of a large file are left to vocab_size and validate (the cost stays two small reads)."""
    tokens = gpt2_like(4 * SAMPLE_TOKENS, "<u4")
    tokens[2 * SAMPLE_TOKENS] = 2**30
    tokens.tofile(tmp_path / "a.bin")
    assert describe(tmp_path, dtype="uint32").num_tokens == tokens.size
    tokens[-1] = 2**30
    tokens.tofile(tmp_path / "a.bin")
    rewrote_in_place(tmp_path / "a.bin")
    with pytest.raises(FormatError, match="ids up to 1,073,741,824"):
        describe(tmp_path, dtype="uint32")


def test_tatm_metadata_with_the_wrong_dtype_is_named(tmp_path: Path) -> None:
    tokens = np.zeros(9_000, dtype="<u2")
    tokens[:8_000] = gpt2_like(8_000, "<u2", seed=2)
    tokens.tofile(tmp_path / "tokenized_0.bin")
    (tmp_path / "metadata.yaml").write_text(TATM_YAML.format(dtype="uint32"))
    with (
        pytest.warns(UserWarning, match="trailing zero tokens"),
        pytest.raises(
            FormatError,
            match=r"looks like uint16: the tokenized_info\.dtype 'uint32' of the tatm "
            r"metadata\.yaml beside it is wrong; set it to uint16",
        ),
    ):
        describe(tmp_path)
    (tmp_path / "metadata.yaml").write_text(TATM_YAML.format(dtype="uint16"))
    with pytest.warns(UserWarning, match="excluded 1000 trailing zero tokens"):
        assert describe(tmp_path).num_tokens == 8_000


def test_helpers() -> None:
    assert implausible_ids(np.array([], dtype=np.int64)) is None
    assert implausible_ids(np.array([5, MAX_PLAUSIBLE_ID - 1])) is None
    assert implausible_ids(np.array([5, -3])) == "ids down to -3, and no id is negative"
    data = np.array([17, 299, 5, 0], dtype="<u2").tobytes()
    assert np.frombuffer(data, "<u4").tolist() == [19_595_281, 5]  # the module's example
    assert fitting_dtype(data, np.dtype("<u4")) == "uint16"
    assert fitting_dtype(data, np.dtype("<u4"), bound=10) is None  # 17 and 299 are too big


def test_validate_suggests_the_dtype(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gpt2_like(20_000, "<u2").tofile(tmp_path / "a.bin")
    path = str(tmp_path / "a.bin")
    assert main(["validate", path, "--dtype", "uint32"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"problem: .*a\.bin: reads as uint32 .* set dtype = 'uint16'", out)
    assert main(["validate", path, "--dtype", "uint32", "--vocab-size", "50257"]) == 1
    out = capsys.readouterr().out
    assert "expected < vocab_size 50257; the file looks like uint16: set dtype = 'uint16'" in out
    assert 'dtype = "uint16"' in out and 'dtype = "uint32"' not in out  # the block that reads it
    assert main(["validate", path, "--dtype", "uint16", "--vocab-size", "50257"]) == 0
    assert 'dtype = "uint16"' in capsys.readouterr().out
