"""``streamload tokenize`` against outputs of the real tools (``tests/golden/tokenize/``).

The goldens come from ``tests/golden/make_tokenize_goldens.py``: ``dolma tokens`` 1.2.1 and
megatron-core 0.16.1 ``IndexedDatasetBuilder`` over the same JSONL and tokenizer. dolma
shuffles with an unseeded ``random``, so its output is compared document for document
(tokens and CSV row fields, keyed by source and line); Megatron is fed the documents in
input order and compared byte for byte with a run that keeps input order
(``--ring-size 1 --batch-size 1``). An optional test runs dolma live when it is installed
aside (``DOLMA_PYTHON``).
"""

from __future__ import annotations

import csv
import gzip
import io
import itertools
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from streamload.cli.main import main
from tests.helpers.paths import TESTS

GOLDEN = TESTS / "golden" / "tokenize"
MODALITIES_PATH = os.environ.get("MODALITIES_PATH", "/tmp/modal_env")
INPUTS = ("docs.jsonl", "more.jsonl.gz")
CASES = {"eos": ["--eos-token-id", "0"], "bos_eos": ["--bos-token-id", "1", "--eos-token-id", "0"]}
DOLMA_PYTHON = os.environ.get("DOLMA_PYTHON", "/tmp/dolmavenv/bin/python")


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the golden inputs as the working directory (dolma's ``src`` is relative)."""
    for name in (*INPUTS, "tokenizer.json"):
        shutil.copy(GOLDEN / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def dolma_documents(folder: Path, dtype: str = "<u2") -> dict[tuple[str, int], tuple]:
    """``(src, loc) → (tokens, id)`` over every part of a dolma-format output."""
    docs: dict[tuple[str, int], tuple] = {}
    for npy in sorted(folder.glob("part-*.npy")):
        tokens = np.fromfile(npy, dtype=dtype)
        raw = gzip.decompress(npy.with_suffix(".csv.gz").read_bytes()).decode()
        assert raw == "" or raw.endswith("\r\n"), "csv.writer rows end in CRLF"
        rows = list(csv.reader(io.StringIO(raw, newline="")))
        assert int(rows[-1][1]) == tokens.size, f"{npy}: rows must tile the token file"
        for start, end, doc_id, src, loc in rows:
            key = (src, int(loc))
            assert key not in docs, f"{key} written twice"
            docs[key] = (tokens[int(start) : int(end)].tolist(), doc_id)
    return docs


def tokenize(dst: str, *extra: str) -> int:
    return main(
        ["tokenize", "--documents", *INPUTS, "--destination", dst, "--tokenizer",
         "tokenizer.json", "--no-progress", *extra]
    )  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_dolma_output_equals_dolma_document_for_document(work: Path, case: str) -> None:
    # dolma drops the line without an id (logging an error); we count it as a bad line
    assert tokenize("out", *CASES[case], "--skip-bad-lines") == 0
    expected = dolma_documents(GOLDEN / f"dolma_{case}")
    got = dolma_documents(work / "out")
    assert len(expected) == 62
    assert got == expected


def test_missing_id_is_a_bad_line_by_default(work: Path, capsys: pytest.CaptureFixture) -> None:
    assert tokenize("out", "--eos-token-id", "0") == 2
    err = capsys.readouterr().err
    assert "docs.jsonl: line 12 has no id field 'id'" in err
    assert not list((work / "out").glob("part-*"))


def test_megatron_output_equals_indexed_dataset_builder_byte_for_byte(work: Path) -> None:
    # one input, ring of one, batches of one: the output keeps the input order
    os.remove("more.jsonl.gz")
    with gzip.open(GOLDEN / "more.jsonl.gz", "rb") as src, open("more.jsonl", "wb") as dst:
        dst.write(src.read())
    args = ["tokenize", "--documents", "docs.jsonl", "--destination", "mg", "--tokenizer",
            "tokenizer.json", "--eos-token-id", "0", "--format", "megatron", "--ring-size", "1",
            "--batch-size", "1", "--skip-bad-lines", "--no-progress"]  # fmt: skip
    assert main(args) == 0
    assert main([*args[:2], "more.jsonl", *args[3:4], "mg2", *args[5:]]) == 0
    # concatenate both outputs as megatron's merge would, then compare with the golden
    from streamload.formats.megatron.megatron import MegatronWriter

    with MegatronWriter(work / "merged", np.uint16) as writer:
        writer.add_index(work / "mg" / "part-0-00000")
        writer.add_index(work / "mg2" / "part-0-00000")
    for suffix in (".bin", ".idx"):
        golden = (GOLDEN / "megatron_eos" / f"docs_text_document{suffix}").read_bytes()
        assert (work / f"merged{suffix}").read_bytes() == golden


def test_modalities_output_equals_pack_encoded_data_byte_for_byte(work: Path) -> None:
    """Golden from Modalities 0.5.0's ``PackedDataGenerator`` (``make_modalities_goldens.py``)
    over the lines both tools tokenize alike (no surrounding whitespace, not empty)."""
    shutil.copy(GOLDEN / "modalities_docs.jsonl", work / "modalities_docs.jsonl")
    args = ["tokenize", "--documents", "modalities_docs.jsonl", "--destination", "md",
            "--tokenizer", "tokenizer.json", "--eos-token-id", "0", "--format", "modalities",
            "--ring-size", "1", "--batch-size", "1", "--no-progress"]  # fmt: skip
    assert main(args) == 0
    golden = (GOLDEN / "modalities_eos" / "docs.pbin").read_bytes()
    assert (work / "md" / "part-0-00000.pbin").read_bytes() == golden


def _modalities_available() -> bool:
    probe = subprocess.run(
        ["python3", "-c", "import modalities.dataloader.create_packed_data"],
        capture_output=True, check=False, env={**os.environ, "PYTHONPATH": MODALITIES_PATH},
    )  # fmt: skip
    return probe.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _modalities_available(), reason="modalities 0.5.0 not installed aside")
def test_live_pack_encoded_data_agrees(work: Path) -> None:
    """Rerun Modalities now (installed aside, never in the venv) and compare with the golden."""
    script = TESTS / "golden" / "make_modalities_goldens.py"
    subprocess.run(
        ["python3", str(script), str(work / "live")], check=True, capture_output=True,
        timeout=300, env={**os.environ, "PYTHONPATH": MODALITIES_PATH},
    )  # fmt: skip
    for name in ("modalities_docs.jsonl", "modalities_eos/docs.pbin"):
        assert (work / "live" / name).read_bytes() == (GOLDEN / name).read_bytes(), name


def _dolma_available() -> bool:
    if not os.path.exists(DOLMA_PYTHON):
        return False
    probe = subprocess.run(
        [DOLMA_PYTHON, "-c", "import dolma.tokenizer.executor"], capture_output=True, check=False
    )
    return probe.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _dolma_available(), reason="dolma 1.2.1 is not installed aside")
def test_live_dolma_agrees(work: Path) -> None:
    script = (
        "from dolma.tokenizer.executor import tokenize_in_parallel as t\n"
        "t(sources=['docs.jsonl', 'more.jsonl.gz'], destination='dolma_out', "
        "tokenizer_name_or_path='tokenizer.json', eos_token_id=0, bos_token_id=1, "
        "num_writers=1, dtype='uint16', metadata_dir='meta', max_size=400)\n"
    )
    subprocess.run([DOLMA_PYTHON, "-c", script], cwd=work, check=True, capture_output=True)
    assert tokenize("out", *CASES["bos_eos"], "--skip-bad-lines", "--max-size", "400") == 0
    assert dolma_documents(work / "out") == dolma_documents(work / "dolma_out")
    for npy in (work / "out").glob("part-*.npy"):
        assert npy.stat().st_size < 400 * 2  # fewer than max_size tokens per file


MCORE_PATH = os.environ.get("MCORE_PATH", "/tmp/mcore")


@pytest.mark.slow
@pytest.mark.skipif(
    not os.path.isdir(os.path.join(MCORE_PATH, "megatron")), reason="megatron-core not aside"
)
def test_live_indexed_dataset_builder_agrees(work: Path) -> None:
    """Our megatron output equals IndexedDatasetBuilder fed the same documents, live."""
    import json
    import runpy
    import sys

    args = ["tokenize", "--documents", "docs.jsonl", "--destination", "mg", "--tokenizer",
            "tokenizer.json", "--bos-token-id", "1", "--eos-token-id", "0", "--format",
            "megatron", "--ring-size", "1", "--batch-size", "1", "--skip-bad-lines",
            "--no-progress"]  # fmt: skip
    assert main(args) == 0
    ours = work / "mg" / "part-0-00000"
    from streamload.catalog.sources import describe_source
    from streamload.config import SourceConfig
    from streamload.formats.registry import open_shard

    (info,) = describe_source(SourceConfig(name="m", path=str(ours) + ".bin")).shards
    shard = open_shard(info)
    bounds = shard.document_bounds()
    docs = [shard.tokens(int(a), int(b)).tolist() for a, b in itertools.pairwise(bounds)]
    (work / "docs.json").write_text(json.dumps(docs))
    script = runpy.run_path(str(GOLDEN.parent / "make_tokenize_goldens.py"))["MCORE_SCRIPT"]
    env = {**os.environ, "PYTHONPATH": MCORE_PATH}
    cmd = [sys.executable, "-c", script, str(work / "docs.json"), str(work / "live")]
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    for suffix in (".bin", ".idx"):
        assert (work / f"live{suffix}").read_bytes() == Path(f"{ours}{suffix}").read_bytes()
