"""``streamload convert``: whole outputs published at once, clear errors, named outputs.

Real files and real processes: a conversion interrupted in-process (an error after N
documents), killed with SIGKILL at a fixed document (the child kills itself, so the point is
deterministic) and killed by its parent while it writes; each leaves nothing that looks like
data at the destination, and the next run cleans the leftovers and writes the whole output.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from streamload.catalog.sources import describe_source
from streamload.cli.main import main
from streamload.config import SourceConfig
from streamload.formats.registry import open_shard
from streamload.tools import convert as convert_module
from streamload.tools.convert import convert, open_writer
from streamload.tools.documents import document_bounds, iter_documents
from tests.helpers.corpus_factory import Corpus, write_corpus
from tests.helpers.paths import REPO

DESTINATIONS = {
    "megatron": "out",
    "modalities": "out.pbin",
    "dolma": "out.npy",
    "datatrove": "out.ds",
    "numpy": "out",
}
"""A destination of each target format, inside an otherwise empty folder."""

KILL_AT_DOCUMENT = """
import os, signal, sys
import streamload.tools.convert as convert
convert.NUMPY_SHARD_TOKENS = 64  # many shards before the kill
real = convert.iter_documents
def dying(shard, bounds, start=0):
    for i, doc in enumerate(real(shard, bounds, start)):
        if i == int(os.environ["KILL_AT_DOCUMENT"]):
            os.kill(os.getpid(), signal.SIGKILL)
        yield doc
convert.iter_documents = dying
from streamload.cli.main import main
sys.exit(main(sys.argv[1:]))
"""
"""A real ``streamload convert`` that SIGKILLs itself when it reaches a given document."""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """Two NPY shards of EOS-ended documents (about 250 documents)."""
    return write_corpus(tmp_path_factory.mktemp("source"), [3000, 2000], mean_doc_len=20)


def error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one-line error of a failed command (a progress bar may precede it, no traceback)."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("streamload convert: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def read_back(path: Path) -> tuple[np.ndarray, list[list[int]]]:
    """The token stream and the documents (split at EOS 0 where there is no index) at ``path``."""
    catalog = describe_source(SourceConfig(name="t", path=(str(path),), dtype="uint16"))
    tokens, docs = [], []
    for info in catalog.shards:
        shard = open_shard(info)
        tokens.append(np.asarray(shard.tokens(0, info.num_tokens)))
        docs += [d.tolist() for d in iter_documents(shard, document_bounds(shard, 0))]
    return np.concatenate(tokens), docs


def convert_args(corpus: Corpus, dst: Path | str, fmt: str) -> list[str]:
    return ["convert", str(corpus.folder), str(dst), "--to", fmt, "--eos", "0"]


def visible_entries(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if not n.startswith("."))


def assert_complete(dst: Path, corpus: Corpus, fmt: str) -> None:
    tokens, docs = read_back(dst)
    np.testing.assert_array_equal(tokens, corpus.stream)
    if fmt != "numpy":  # shards of a fixed size cut documents
        assert docs == source_documents(corpus)


def source_documents(corpus: Corpus) -> list[list[int]]:
    """The corpus's documents as convert sees them: split at EOS within each source shard."""
    docs = []
    for tokens in corpus.tokens:
        ends = np.flatnonzero(tokens == 0) + 1
        docs += [d.tolist() for d in np.split(tokens, ends[ends < tokens.size])]
    return docs


# -- interrupted and killed writers ----------------------------------------------------------


@pytest.mark.parametrize("fmt", sorted(DESTINATIONS))
def test_interrupted_convert_publishes_nothing(
    tmp_path: Path, corpus: Corpus, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error after 100 documents leaves the destination folder empty (no hidden files)."""
    monkeypatch.setattr(convert_module, "NUMPY_SHARD_TOKENS", 64)
    catalog = describe_source(SourceConfig(name="t", path=(str(corpus.folder),)))
    writer = open_writer(fmt, str(tmp_path / DESTINATIONS[fmt]), np.dtype("uint16"))

    def fail_at_100(documents: int, tokens: int) -> None:
        if documents == 100:
            raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        convert(catalog, writer, eos_token_id=0, progress=fail_at_100)
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
@pytest.mark.parametrize("fmt", sorted(DESTINATIONS))
def test_killed_convert_leaves_no_output_and_rerun_completes(
    tmp_path: Path, corpus: Corpus, fmt: str
) -> None:
    """kill -9 at document 100: nothing at the destination; the rerun removes the dead run's
    hidden leftovers and writes the whole output."""
    dst = tmp_path / DESTINATIONS[fmt]
    env = {**os.environ, "KILL_AT_DOCUMENT": "100"}
    args = convert_args(corpus, dst, fmt)
    child = subprocess.run(
        [sys.executable, "-c", KILL_AT_DOCUMENT, *args], cwd=REPO, env=env, capture_output=True
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    assert visible_entries(tmp_path) == []  # hidden leftovers only
    assert main(args) == 0
    assert_complete(dst, corpus, fmt)
    assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == []


def test_convert_killed_by_its_parent_while_writing(tmp_path: Path) -> None:
    """The plain CLI, SIGKILLed once its output holds data: no folder of valid shards."""
    source = tmp_path / "src.npy"
    np.save(source, np.tile(np.array([1, 2, 3, 4, 5, 6, 7, 0], np.uint16), 300_000))
    parent = tmp_path / "dst"
    parent.mkdir()
    dst = parent / "out"
    args = ["convert", str(source), str(dst), "--to", "numpy", "--eos", "0"]
    child = subprocess.Popen(
        [sys.executable, "-m", "streamload", *args],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not _holds_data(parent) and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        child.send_signal(signal.SIGKILL)
    finally:
        rc = child.wait()
    assert rc == -signal.SIGKILL, "the conversion ended before it could be killed"
    assert not dst.exists()
    assert main(args) == 0
    assert np.load(dst / "shard_00000.npy").size == 2_400_000
    assert os.listdir(parent) == ["out"]


def _holds_data(folder: Path) -> bool:
    """Whether any file under ``folder`` (hidden ones included) has more than 64 KiB."""
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                if os.path.getsize(os.path.join(root, name)) > 1 << 16:
                    return True
            except FileNotFoundError:
                continue
    return False


# -- destinations: suffixes, existing outputs, unwritable places -----------------------------


@pytest.mark.parametrize(
    ("fmt", "name", "files"),
    [
        ("megatron", "out", ["out.bin", "out.idx"]),
        ("megatron", "out.bin", ["out.bin", "out.idx"]),
        ("megatron", "out.idx", ["out.bin", "out.idx"]),
        ("modalities", "out.pbin", ["out.pbin"]),
        ("dolma", "out.npy", ["out.csv.gz", "out.npy"]),
        ("datatrove", "out.ds", ["out.ds", "out.ds.index", "out.ds.metadata"]),
        ("numpy", "out", ["out"]),
    ],
)
def test_convert_writes_the_named_output(
    tmp_path: Path, corpus: Corpus, fmt: str, name: str, files: list[str], capsys
) -> None:
    """Each target with its suffix: exactly those files, read back whole, and the CLI names
    every path it wrote."""
    dst = tmp_path / "dst"
    dst.mkdir()
    assert main(convert_args(corpus, dst / name, fmt)) == 0
    assert os.listdir(dst) == files or sorted(os.listdir(dst)) == files
    out = capsys.readouterr().out
    for written in files:
        assert str(dst / written) in out
    assert f"as {fmt} (uint16)" in out
    assert_complete(dst / files[-1 if fmt == "dolma" else 0].removesuffix(".bin"), corpus, fmt)


@pytest.mark.parametrize("fmt", sorted(DESTINATIONS))
@pytest.mark.parametrize("spelling", ["relative", "./", "../", "absolute", "file://"])
def test_convert_destination_spellings(
    tmp_path: Path, corpus: Corpus, fmt: str, spelling: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every target writes to the same place however the destination is spelled."""
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    name = DESTINATIONS[fmt]
    dst = {
        "relative": name,
        "./": f"./{name}",
        "../": f"../work/{name}",
        "absolute": str(tmp_path / "work" / name),
        "file://": f"file://{tmp_path / 'work' / name}",
    }[spelling]
    assert main(["convert", str(corpus.folder), dst, "--to", fmt, "--eos", "0"]) == 0
    assert_complete(tmp_path / "work" / name, corpus, fmt)
    assert os.listdir(tmp_path) == ["work"]


def test_remote_destination_is_refused(tmp_path: Path, corpus: Corpus, capsys) -> None:
    assert main(convert_args(corpus, "s3://bucket/out.pbin", "modalities")) == 2
    assert "writes its outputs to local paths only" in error_line(capsys)


@pytest.mark.parametrize(
    ("fmt", "name", "suffix"),
    [
        ("modalities", "out", ".pbin"),
        ("modalities", "out.bin", ".pbin"),
        ("datatrove", "out", ".ds"),
        ("datatrove", "out.bin", ".ds"),
        ("dolma", "out", ".npy"),
        ("dolma", "out.bin", ".npy"),
    ],
)
def test_convert_refuses_a_file_name_without_the_suffix(
    tmp_path: Path, corpus: Corpus, fmt: str, name: str, suffix: str, capsys
) -> None:
    """A name the format's readers would not recognise is refused, naming the suffix; nothing
    is written (before: modalities and datatrove wrote a file read back as raw, dolma raised a
    ValueError)."""
    assert main(convert_args(corpus, tmp_path / name, fmt)) == 2
    err = error_line(capsys)
    assert f"{tmp_path / name}" in err and f"end in {suffix}" in err and f"--to {fmt}" in err
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("fmt", sorted(DESTINATIONS))
def test_convert_refuses_to_overwrite(tmp_path: Path, corpus: Corpus, fmt: str, capsys) -> None:
    """An existing output is never replaced: exit 2 naming it, the old files unchanged."""
    dst = tmp_path / DESTINATIONS[fmt]
    assert main(convert_args(corpus, dst, fmt)) == 0
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(convert_args(corpus, dst, fmt)) == 2
    err = error_line(capsys)
    assert "already exists" in err and "remove it" in err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_convert_into_an_existing_empty_folder(tmp_path: Path, corpus: Corpus) -> None:
    """``--to numpy`` may fill an empty folder; a single-file target given a folder writes
    the format's default name inside it."""
    (tmp_path / "empty").mkdir()
    assert main(convert_args(corpus, tmp_path / "empty", "numpy")) == 0
    assert visible_entries(tmp_path / "empty") == ["shard_00000.npy"]
    (tmp_path / "box").mkdir()
    assert main(convert_args(corpus, tmp_path / "box", "modalities")) == 0
    assert os.listdir(tmp_path / "box") == ["data.pbin"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--dtype", "foo"], "--dtype 'foo' is not a numpy dtype"),
        (["--dtype", "float32"], "--dtype float32 cannot hold token ids"),
        (["--dtype", "uint8"], "does not fit --dtype uint8"),
    ],
)
def test_bad_dtype_is_a_one_line_error(
    tmp_path: Path, corpus: Corpus, extra: list[str], message: str, capsys
) -> None:
    dst = tmp_path / "out"
    assert main([*convert_args(corpus, dst, "megatron"), *extra]) == 2
    assert message in error_line(capsys)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("fmt", ["modalities", "numpy"])
def test_narrow_dtype_names_the_source_document(
    tmp_path: Path, corpus: Corpus, fmt: str, capsys
) -> None:
    dst = tmp_path / DESTINATIONS[fmt]
    assert main([*convert_args(corpus, dst, fmt), "--dtype", "uint8"]) == 2
    err = error_line(capsys)
    assert str(corpus.paths[0]) in err and "does not fit --dtype uint8" in err, err
    assert os.listdir(tmp_path) == []


def test_bad_destinations_are_one_line_errors(tmp_path: Path, corpus: Corpus, capsys) -> None:
    """A file where a folder is needed, a folder inside a file, a missing source."""
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    cases = [
        (convert_args(corpus, blocker, "numpy"), "already exists"),
        (convert_args(corpus, blocker / "out.pbin", "modalities"), "cannot write"),
        (convert_args(corpus, blocker / "out", "numpy"), "cannot write"),
        (["convert", str(tmp_path / "missing"), str(tmp_path / "o"), "--to", "numpy"], "no such"),
    ]
    for args, message in cases:
        assert main(args) == 2, args
        assert message in error_line(capsys), args
    assert os.listdir(tmp_path) == ["file.txt"] and blocker.read_text() == "x"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_destination_is_a_one_line_error(tmp_path: Path, corpus: Corpus, capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        assert main(convert_args(corpus, folder / "out", "megatron")) == 2
    finally:
        folder.chmod(0o700)
    assert "cannot write" in error_line(capsys)


def test_unknown_target_is_a_usage_error(tmp_path: Path, corpus: Corpus, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(convert_args(corpus, tmp_path / "o", "hdf5"))
    assert exit_info.value.code == 2
    assert "invalid choice: 'hdf5'" in capsys.readouterr().err
