"""Seeded fuzzing of every format's header, index and companion files (issue 22).

For each format a small valid fixture is written by streamload's writer for it (byte-identical
to the real tool's), or taken from tests/fixtures (MDS, LitData: written by the real tools);
then each of its files is mutated ``CASES[...]`` times (:mod:`tests.formats.fuzzing`): every
case must end in a ``StreamloadError`` or in reads that stay within the file (the same data,
or other valid data when only token bytes changed); never another exception, a hang, or a
read outside the file. Seeds are fixed: a failure names the case that reproduces it.
"""

from __future__ import annotations

import functools
import io
import json
import random
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamload.catalog.sources import describe_source
from streamload.config import SourceConfig
from streamload.errors import StreamloadError
from streamload.formats import open_shard
from streamload.formats.datatrove import DatatroveWriter
from streamload.formats.dolma import DolmaWriter
from streamload.formats.jsonl import prepare_jsonl
from streamload.formats.megatron import MegatronWriter
from streamload.formats.modalities import HEADER_SIZE, ModalitiesWriter
from tests.formats.fuzzing import Target, read_everything, run_cases, run_integer_cases
from tests.helpers.extras import needs
from tests.helpers.paths import TESTS
from tests.helpers.tokenizer import train_bpe

SEED = 22
DOCS = [[10, 11, 12, 0], [20, 21, 0], [300, 301, 302, 303, 304, 0], [7, 0], [40, 41, 42, 0]]
TATM_YAML = (
    "name: tokenized\ntokenized_info:\n  dtype: uint16\n  file_extension: bin\n"
    "  tokenizer: t300.json\n  vocab_size: 400\n"
)


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def u64_fields(start: int, count: int) -> tuple[tuple[int, int], ...]:
    return tuple((start + 8 * i, 8) for i in range(count))


def megatron_fixture(folder: Path) -> tuple[dict[str, bytes], dict[Target, int]]:
    with MegatronWriter(folder / "web_text_document", np.uint16) as writer:
        for doc in DOCS[:3]:
            writer.add_document(np.array(doc))
        writer.add_document(np.array([], dtype=np.int64))  # an empty document
        writer.add_document(np.array(DOCS[3] + DOCS[4]), lengths=[2, 4])  # two sequences
    s, d = 5, 6
    header = ((9, 8), (17, 1), (18, 8), (26, 8))
    arrays = tuple((34 + 4 * i, 4) for i in range(s)) + u64_fields(34 + 4 * s, s)
    arrays += u64_fields(34 + 12 * s, d)
    idx = Target("web_text_document.idx", header + arrays, (0, 34 + 12 * s + 8 * d))
    return files_of(folder), {idx: 220, Target("web_text_document.bin"): 40}


def modalities_fixture(folder: Path) -> tuple[dict[str, bytes], dict[Target, int]]:
    with ModalitiesWriter(folder / "docs.pbin", 2, eod_token_id=0) as writer:
        for doc in DOCS:
            writer.add_document(np.array(doc))
    data = files_of(folder)
    tail = HEADER_SIZE + struct.unpack_from("<Q", data["docs.pbin"])[0]
    pbin = Target("docs.pbin", ((0, 8), (8, 4)), (0, HEADER_SIZE), label="docs.pbin header")
    hot = Target("docs.pbin", ((0, 8), (8, 4)), (tail, len(data["docs.pbin"])),
                 label="docs.pbin pickled index")  # fmt: skip
    return data, {pbin: 120, hot: 140}


def dolma_fixture(folder: Path) -> tuple[dict[str, bytes], dict[Target, int]]:
    ids = ["d0", 'q,"1"', "a\nb", "", "d4"]
    with DolmaWriter(folder / "part-0-00000.npy", np.uint16, mtime=0) as writer:
        for i, doc in enumerate(DOCS):
            writer.add_document(np.array(doc), doc_id=ids[i], src="s3://b/x.json.gz", loc=i + 1)
    csv = Target("part-0-00000.csv.gz", hot=(0, 10), kind="gzip")
    return files_of(folder), {csv: 220, Target("part-0-00000.npy"): 40}


def datatrove_fixture(folder: Path) -> tuple[dict[str, bytes], dict[Target, int]]:
    with DatatroveWriter(folder / "x.ds", "tok300.json", 2, save_loss_metadata=True) as writer:
        for i, doc in enumerate(DOCS):
            writer.add_document(np.array(doc), loss_mask=np.arange(len(doc)) % (i + 2) > 0)
    index = Target("x.ds.index", u64_fields(0, len(DOCS)))
    return files_of(folder), {
        index: 120,
        Target("x.ds.metadata", kind="text"): 120,
        Target("x.ds.loss"): 30,
        Target("x.ds"): 30,
    }


def npy_fixture(folder: Path) -> tuple[dict[str, bytes], dict[Target, int]]:
    tokens = np.array([t for doc in DOCS for t in doc], dtype=np.uint16)
    np.save(folder / "shard_00000.npy", tokens)
    buf = io.BytesIO()
    np.lib.format.write_array(buf, tokens.astype(np.int32), version=(2, 0))
    (folder / "shard_00001.npy").write_bytes(buf.getvalue())
    fields = ((6, 1), (7, 1), (8, 2))
    return files_of(folder), {
        Target("shard_00000.npy", fields, (0, 128), kind="text"): 160,
        Target("shard_00001.npy", ((6, 1), (7, 1), (8, 4)), (0, 128), kind="text"): 80,
    }


def tatm_fixture(folder: Path) -> tuple[dict[str, bytes], dict[Target, int]]:
    tokens = np.zeros(40, dtype="<u2")
    flat = [t for doc in DOCS for t in doc]
    tokens[: len(flat)] = flat
    tokens.tofile(folder / "tokenized_0.bin")
    (folder / "metadata.yaml").write_text(TATM_YAML)
    return files_of(folder), {
        Target("metadata.yaml", kind="text"): 120,
        Target("tokenized_0.bin"): 40,
    }


def mds_fixture(folder: Path, name: str) -> tuple[dict[str, bytes], dict[Target, int]]:
    """Real MDSWriter shards (tests/fixtures/mds/``name``): the index, and shard 0's offset
    table and samples (column sizes, array headers, tokens)."""
    data = files_of(TESTS / "fixtures" / "mds" / name)
    shard = data["shard.00000.mds"]
    count, first = struct.unpack_from("<II", shard)
    table = tuple((4 * i, 4) for i in range(count + 2))  # u32 count, offsets[count + 1]
    starts = struct.unpack_from(f"<{count}I", shard, 4)
    variable = json.loads(data["index.json"])["shards"][0]["column_sizes"].count(None)
    sizes = tuple((s + 4 * i, 4) for s in starts for i in range(variable))  # each sample's
    return data, {
        Target("index.json", kind="json"): 50,
        Target("shard.00000.mds", table, (0, 4 * (count + 2)), label="shard header"): 50,
        Target("shard.00000.mds", sizes, (first, len(shard)), label="shard samples"): 120,
    }


def streaming_cache_fixture(folder: Path) -> tuple[dict[str, bytes], dict[Target, int]]:
    """tests/fixtures/mds/i32_zstd as StreamingDataset leaves it after reading it: each shard
    decompressed beside its ``.mds.zstd`` (issue 36); the copies are read as the same shards."""
    needs("zstandard", "mds")
    import zstandard

    data = files_of(TESTS / "fixtures" / "mds" / "i32_zstd")
    for name in [n for n in data if n.endswith(".zstd")]:
        data[name[:-5]] = zstandard.ZstdDecompressor().decompressobj().decompress(data[name])
    return data, {
        Target("index.json", kind="json"): 60,
        Target("shard.00000.mds.zstd"): 30,
        Target("shard.00001.mds", label="shard.00001.mds (decompressed copy)"): 30,
    }


def litdata_fixture(folder: Path) -> tuple[dict[str, bytes], dict[Target, int]]:
    """Real ``TokensLoader`` chunks (tests/fixtures/litdata/i32: 3 chunks of int32 tokens)."""
    data = files_of(TESTS / "fixtures" / "litdata" / "i32")
    (count,) = struct.unpack_from("<I", data["chunk-0-0.bin"])
    header = tuple((4 * i, 4) for i in range(count + 2))
    return data, {
        Target("index.json", kind="json"): 120,
        Target("chunk-0-0.bin", header, (0, 4 * (count + 2))): 80,
    }


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> str:
    rng = random.Random(0)
    words = ["fox", "dog", "über", "zebra", "quartz", "jump", "lazy", "the"]
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    train_bpe(path, [" ".join(rng.choice(words) for _ in range(10)) for _ in range(100)])
    return str(path)


def jsonl_fixture(folder: Path, tokenizer: str) -> tuple[dict[str, bytes], dict[Target, int]]:
    texts = ["the lazy fox", "über zebra jump", "", "dog " * 12, "quartz"]
    (folder / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    prepare_jsonl(folder / "a.jsonl", tokenizer, eos_token_id=0)
    data = files_of(folder)
    return data, {
        Target("a.tok.json", kind="json"): 160,
        Target("a.idx", hot=(0, len(data["a.idx"]))): 120,
        Target("a.jsonl", kind="text"): 40,
    }


FIXTURES: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {
    "megatron": (megatron_fixture, {}),
    "modalities": (modalities_fixture, {}),
    "dolma": (dolma_fixture, {"dtype": "uint16"}),
    "datatrove": (datatrove_fixture, {}),
    "numpy": (npy_fixture, {"dtype": "int32"}),  # uint16 and int32 files: cast-safe
    "raw (tatm)": (tatm_fixture, {}),
    # id: str, tokens: ndarray:uint16 (a shape header per sample), 2 shards
    "mds": (functools.partial(mds_fixture, name="u16"), {}),
    # tokens: ndarray (a dtype byte, then a shape header per sample)
    "mds (ndarray)": (functools.partial(mds_fixture, name="any_dtype"), {}),
    "mds (Streaming cache)": (streaming_cache_fixture, {}),
    "litdata": (litdata_fixture, {}),
}


def check(report: Any, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with capsys.disabled():
        print(f"\nfuzz {name}: {json.dumps(report.summary())}")
    assert not report.failures, "\n\n".join(report.failures[:5])
    outcomes = {o for t in report.summary().values() for o in t}
    assert "error" in outcomes and "same" in outcomes  # the mutations reach both ends


@pytest.mark.parametrize("name", list(FIXTURES))
def test_fuzz_format(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make, kw = FIXTURES[name]
    source = tmp_path / "source"
    source.mkdir()
    fixture, targets = make(source)

    def read(folder: Path) -> Any:
        return read_everything(folder, kw)

    report = run_cases(fixture, targets, tmp_path / "cases", read, SEED)
    check(report, name, capsys)


@pytest.mark.parametrize("name", ["mds", "mds (ndarray)", "litdata"])
def test_every_index_integer_is_range_checked(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, kw = FIXTURES[name]
    fixture, _ = make(tmp_path)
    report = run_integer_cases(
        fixture, "index.json", tmp_path / "cases", lambda f: read_everything(f, kw)
    )
    with capsys.disabled():
        print(f"\nout-of-range integers {name}: {json.dumps(report.summary())}")
    assert not report.failures, "\n\n".join(report.failures[:5])
    assert report.counts[("index.json", "error")] > 0


def test_fuzz_jsonl(tokenizer: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "source"
    source.mkdir()
    fixture, targets = jsonl_fixture(source, tokenizer)

    def read(folder: Path) -> Any:
        return read_everything(folder, {"format": "jsonl"}, "*.jsonl")

    report = run_cases(fixture, targets, tmp_path / "cases", read, SEED)
    check(report, "jsonl", capsys)


def test_fuzz_raw_widths(tmp_path: Path) -> None:
    """A headerless file read at every width, without vocab_size (issue 36, item 8): wider
    than written is refused naming the written width; as written (or the same width) reads
    the same ids; narrower is not caught (documented in ``plausible_ids``) unless a signed
    reading gives negative ids."""
    rng = np.random.default_rng(SEED)
    for case in range(60):
        written = str(rng.choice(["uint16", "uint32", "int32", "int64"]))
        top = 2**15 if written == "uint16" else int(rng.integers(2**12, 2**21))
        tokens = rng.integers(0, top, size=int(rng.integers(1_000, 30_000))).astype(written)
        path = tmp_path / f"case{case}.bin"
        tokens.tofile(path)
        read = str(rng.choice(["uint16", "int16", "uint32", "int32", "uint64", "int64"]))
        wider = np.dtype(read).itemsize - np.dtype(written).itemsize
        where = f"case {case}: {written} read as {read}"
        try:
            catalog = describe_source(SourceConfig(name="w", path=str(path), dtype=read))
        except StreamloadError as exc:
            fit = "uint16" if written == "uint16" else "uint32"
            if wider > 0:
                assert f"looks like {fit}: set dtype = '{fit}'" in str(exc) or (
                    "is not a multiple" in str(exc)
                ), f"{where}: {exc}"
            else:
                assert wider < 0 and "no id is negative" in str(exc), f"{where}: {exc}"
            continue
        assert wider <= 0, where
        if wider == 0:
            got = open_shard(catalog.shards[0]).tokens(0, tokens.size)
            assert np.asarray(got).tolist() == tokens.tolist(), where
