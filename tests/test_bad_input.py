"""Bad input through the public entry points: each raises the right error naming file and value."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import streamload
from streamload import (
    ConfigError,
    FormatError,
    LoaderOptions,
    SampleStream,
    StreamloadError,
    build_loader,
)


def config(path: Path | str, **top: Any) -> dict[str, Any]:
    source = {"name": "web", "path": str(path), **top.pop("source", {})}
    return {"seq_len": 8, "sources": [source], **top}


def stream_of(cfg: dict[str, Any]) -> SampleStream:
    return SampleStream.from_config(streamload.load_config(cfg))


def test_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=rf"'{re.escape(str(tmp_path))}' holds no token files"):
        build_loader(config(tmp_path), batch_size=2)


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"source 'web': path '.*/gone': no such file or folder"):
        build_loader(config(tmp_path / "gone"), batch_size=2)


def test_zero_length_shard(make_corpus: Callable) -> None:
    corpus = make_corpus([100, 0, 100])
    with pytest.raises(FormatError, match=r"shard_00001\.npy: shard holds 0 tokens"):
        build_loader(corpus.config(), batch_size=2)
    raw = make_corpus([100, 100], fmt="raw")
    raw.paths[1].write_bytes(b"")
    with pytest.raises(FormatError, match=r"shard_00001\.bin: shard is empty \(0 bytes\)"):
        build_loader(raw.config(), batch_size=2)


@pytest.mark.parametrize("cut", [1, 2, 50, 199])
def test_truncated_npy(make_corpus: Callable, cut: int) -> None:
    corpus = make_corpus([100, 100])
    path = corpus.paths[1]
    data = path.read_bytes()
    path.write_bytes(data[:-cut])
    size = len(data) - cut
    with pytest.raises(
        FormatError,
        match=rf"shard_00001\.npy: NPY header says 100 tokens of uint16 \(328 bytes with the "
        rf"header\) but the file is {size} bytes; the file is truncated",
    ):
        build_loader(corpus.config(), batch_size=2)


def test_header_cut_off(make_corpus: Callable) -> None:
    corpus = make_corpus([100])
    corpus.paths[0].write_bytes(corpus.paths[0].read_bytes()[:40])
    with pytest.raises(FormatError, match=r"shard_00000\.npy: corrupt NPY header"):
        stream_of(corpus.config())


@pytest.mark.parametrize("extra", [1, 2, 64])
def test_npy_with_trailing_bytes(make_corpus: Callable, extra: int) -> None:
    corpus = make_corpus([100, 100])
    with open(corpus.paths[0], "ab") as fh:
        fh.write(b"\x07" * extra)
    with pytest.raises(
        FormatError,
        match=rf"shard_00000\.npy: NPY header says 100 tokens .* file is {328 + extra} bytes; "
        r"the file is followed by trailing bytes",
    ):
        build_loader(corpus.config(), batch_size=2)


@pytest.mark.parametrize("cross_shard", [True, False])
def test_seq_len_larger_than_the_data(make_corpus: Callable, cross_shard: bool) -> None:
    corpus = make_corpus([30, 30])
    seq_len = 60 if cross_shard else 30  # 60 tokens in all, 30 per shard
    cfg = corpus.config(seq_len=seq_len, sampling={"cross_shard": cross_shard})
    where = "the source" if cross_shard else "any single shard"
    with pytest.raises(
        ConfigError,
        match=rf"source 'web': {where} holds fewer than seq_len \+ 1 = {seq_len + 1} tokens "
        r"\(60 tokens in 2 shards\)",
    ):
        build_loader(cfg, batch_size=1)
    # one token less and there is exactly one window per (source | shard)
    assert stream_of(corpus.config(seq_len=seq_len - 1, sampling={"cross_shard": cross_shard}))


def plant_token(corpus: Any, shard: int, offset: int, value: int) -> None:
    tokens = np.load(corpus.paths[shard])
    tokens[offset] = value
    np.save(corpus.paths[shard], tokens)


@pytest.mark.parametrize("num_workers", [0, 1])
def test_token_id_out_of_vocab(make_corpus: Callable, num_workers: int) -> None:
    """Start-up reads no token data; the batch holding the bad token raises, naming it."""
    corpus = make_corpus([160, 161], vocab_size=500)  # 40 windows
    plant_token(corpus, shard=1, offset=37, value=4321)  # stream token 197
    cfg = corpus.config(seq_len=8, vocab_size=500, sampling={"shuffle": False})
    loader = build_loader(
        cfg,
        batch_size=2,
        num_workers=num_workers,
        options=LoaderOptions(chunk_batches=1, prefetch=0),
    )
    delivered = []
    with pytest.raises(
        FormatError,
        match=r"shard_00001\.npy: token 37 is 4321, expected < vocab_size = 500",
    ):
        for batch in loader:
            delivered.append(batch["sample_index"].tolist())
    # window 24 (tokens 192..200) holds it; it is in batch 12 (samples 24, 25)
    assert delivered == [[2 * k, 2 * k + 1] for k in range(12)]


def test_token_id_out_of_vocab_through_the_stream(make_corpus: Callable) -> None:
    corpus = make_corpus([100, 100], vocab_size=500)
    plant_token(corpus, shard=0, offset=99, value=500)
    stream = stream_of(corpus.config(seq_len=8, vocab_size=500, sampling={"shuffle": False}))
    tokens, _ = stream.read(0, np.arange(12))  # windows 0..11 end at token 96
    assert tokens.shape == (12, 9)
    tokens, _ = stream.read(0, np.arange(13, 24))  # windows inside shard 1
    assert tokens.shape == (11, 9)
    # window 12 covers tokens 96..104, straddling shards 0 and 1
    with pytest.raises(FormatError, match=r"shard_00000\.npy: token 99 is 500, expected <"):
        stream.read(0, np.array([3, 12, 20]))


def test_negative_token_ids(tmp_path: Path) -> None:
    tokens = np.arange(40, dtype=np.int32)
    tokens[21] = -7
    np.save(tmp_path / "a.npy", tokens)
    stream = stream_of(config(tmp_path, sampling={"shuffle": False}))
    with pytest.raises(FormatError, match=r"a\.npy: token 21 is -7, expected >= 0"):
        stream.read(0, np.array([2]))


@pytest.mark.parametrize("size", [3, 15, 1001])
def test_raw_size_not_a_multiple_of_the_dtype(tmp_path: Path, size: int) -> None:
    (tmp_path / "odd.bin").write_bytes(b"\x01" * size)
    with pytest.raises(
        FormatError,
        match=rf"odd\.bin: file size {size} bytes is not a multiple of the uint32 item size 4",
    ):
        build_loader(config(tmp_path, source={"dtype": "uint32"}), batch_size=1)


@pytest.mark.parametrize(
    ("dtype", "vocab_size", "top"),
    [("uint16", 65_537, 65_535), ("uint8", 257, 255), ("int16", 40_000, 32_767)],
)
def test_vocab_the_dtype_cannot_hold(
    make_corpus: Callable, dtype: str, vocab_size: int, top: int
) -> None:
    corpus = make_corpus([100], dtype=dtype, vocab_size=100)
    with pytest.raises(
        ConfigError,
        match=rf"source 'web': vocab_size = {vocab_size} needs ids up to {vocab_size - 1} but "
        rf".*shard_00000\.npy stores {dtype} \(max {top}\)",
    ):
        build_loader(corpus.config(vocab_size=vocab_size), batch_size=1)
    # the largest vocabulary the dtype holds is fine
    assert stream_of(corpus.config(vocab_size=top + 1))


def test_eos_the_dtype_cannot_hold(make_corpus: Callable) -> None:
    corpus = make_corpus([100], dtype="uint8", vocab_size=100)
    with pytest.raises(ConfigError, match=r"eos_token_id = 300 cannot occur in uint8 tokens"):
        build_loader(corpus.config(eos_token_id=300, vocab_size=None), batch_size=1)


def test_shards_of_incompatible_dtypes(tmp_path: Path) -> None:
    """int64 and uint64 have no common integer dtype: refuse, naming the dtypes."""
    np.save(tmp_path / "a.npy", np.arange(50, dtype=np.int64))
    np.save(tmp_path / "b.npy", np.arange(50, dtype=np.uint64))
    with pytest.raises(StreamloadError, match=r"int64.*uint64|uint64.*int64"):
        build_loader(config(tmp_path), batch_size=1)


@pytest.mark.parametrize("dtype", ["float32", "float16", "complex64", "bool"])
def test_non_integer_npy(tmp_path: Path, dtype: str) -> None:
    np.save(tmp_path / "f.npy", np.ones(50, dtype=dtype))
    with pytest.raises(
        FormatError,
        match=rf"f\.npy: dtype {dtype} cannot hold token ids; expected an integer dtype",
    ):
        build_loader(config(tmp_path), batch_size=1)


def test_object_npy(tmp_path: Path) -> None:
    np.save(tmp_path / "o.npy", np.array([1, "x"], dtype=object), allow_pickle=True)
    with pytest.raises(FormatError, match=r"o\.npy: NPY holds Python objects"):
        build_loader(config(tmp_path), batch_size=1)


@pytest.mark.parametrize("shape", [(10, 20), (2, 3, 40), ()])
def test_npy_that_is_not_1d(tmp_path: Path, shape: tuple[int, ...]) -> None:
    np.save(tmp_path / "m.npy", np.ones(shape, dtype=np.uint16))
    with pytest.raises(FormatError, match=rf"m\.npy: NPY shape {re.escape(str(shape))} is not 1-D"):
        build_loader(config(tmp_path), batch_size=1)


def test_headerless_npy_needs_a_dtype(tmp_path: Path) -> None:
    np.arange(100, dtype="<u2").tofile(tmp_path / "part-0.npy")
    with pytest.raises(FormatError, match=r"part-0\.npy: a \.npy file without the .*set dtype"):
        build_loader(config(tmp_path), batch_size=1)
    loader = build_loader(
        config(tmp_path, source={"dtype": "uint16"}, sampling={"shuffle": False}), batch_size=1
    )
    assert next(iter(loader))["input_ids"].tolist() == [list(range(8))]


def test_masks_without_eos(make_corpus: Callable) -> None:
    corpus = make_corpus([100])
    cfg = corpus.config(eos_token_id=None, packing={"masks": True})
    with pytest.raises(ConfigError, match=r"packing\.masks = true.*set eos_token_id"):
        build_loader(cfg, batch_size=1)


def test_several_sources(make_corpus: Callable) -> None:
    a, b = make_corpus([100]), make_corpus([100])
    cfg = a.config()
    cfg["sources"].append({"name": "code", "path": str(b.folder)})
    with pytest.raises(ConfigError, match=r"web, code have no weight"):
        build_loader(cfg, batch_size=1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_size": 0}, r"batch_size = 0 must be >= 1"),
        ({"batch_size": 2, "rank": 2, "world_size": 2}, r"rank 2 is not in \[0, world_size = 2\)"),
        ({"batch_size": 2, "num_workers": -1}, r"num_workers = -1 must be >= 0"),
        ({"batch_size": 3, "world_size": 2, "rank": 0}, r"global_batch_size = 8 in the config"),
        ({"batch_size": "4"}, r"batch_size = '4' must be an integer"),
        ({"batch_size": 1.5}, r"batch_size = 1\.5 must be an integer"),
        ({"batch_size": True}, r"batch_size = True must be an integer"),
        ({"batch_size": 8, "num_workers": 1.5}, r"num_workers = 1\.5 must be an integer"),
        ({"batch_size": 8, "num_workers": 10_000}, r"num_workers = 10000 must be <= 256"),
        ({"batch_size": 4, "rank": 0.0, "world_size": 2}, r"rank = 0\.0 must be an integer"),
        ({"batch_size": 4, "rank": 0, "world_size": "2"}, r"world_size = '2' must be an"),
        ({"batch_size": 8, "options": {"prefetch": -1}}, r"prefetch = -1 must be >= 0"),
        ({"batch_size": 8, "options": "fast"}, r"options = 'fast' must be a LoaderOptions"),
    ],
)
def test_bad_loader_arguments(make_corpus: Callable, kwargs: dict, match: str) -> None:
    corpus = make_corpus([200])
    with pytest.raises(ConfigError, match=match):
        build_loader(corpus.config(global_batch_size=8), **kwargs)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (
            {"worker_type": "process", "multiprocessing_context": "bogus"},
            r"multiprocessing_context = 'bogus' is not one of",
        ),
        ({"worker_type": "gpu"}, r"worker_type = 'gpu' is not one of 'thread', 'process'"),
        ({"prefetch": 1.5}, r"prefetch = 1\.5 must be an integer"),
        ({"chunk_batches": "2"}, r"chunk_batches = '2' must be an integer"),
    ],
)
def test_bad_loader_options(make_corpus: Callable, options: dict, match: str) -> None:
    """Refused when the options are made, before any listing or worker start."""
    corpus = make_corpus([200])
    with pytest.raises(ConfigError, match=match):
        build_loader(corpus.config(), batch_size=2, num_workers=1, options=LoaderOptions(**options))


def test_stream_loader_checks_its_arguments(make_corpus: Callable) -> None:
    """The arguments are checked by the loader itself too, not only by build_loader."""
    from streamload.plan.partition import RankSpec

    stream = stream_of(make_corpus([200]).config())
    with pytest.raises(ConfigError, match=r"num_workers = 1\.5 must be an integer"):
        streamload.StreamLoader(stream, RankSpec(0, 1, 2), num_workers=1.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"num_workers = 300 must be <= 256"):
        streamload.StreamLoader(stream, RankSpec(0, 1, 2), num_workers=300)


@pytest.mark.parametrize("config", [None, [1, 2], 7])
def test_a_config_of_the_wrong_type(config: Any) -> None:
    with pytest.raises(ConfigError, match=r"expected a path to a TOML/YAML/JSON file, a mapping"):
        build_loader(config, batch_size=2)


def test_dtype_conflicts_through_build_loader(make_corpus: Callable) -> None:
    corpus = make_corpus([100])
    with pytest.raises(FormatError, match=r"shard_00000\.npy: NPY header says dtype uint16"):
        build_loader(corpus.config(source={"dtype": "uint8"}), batch_size=1)  # not cast-safe
