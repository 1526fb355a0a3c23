"""Every output format lands exactly where ``--destination`` says, however it is spelled.

Issue 22 item 1: a relative destination made ``--format numpy`` write its data under
``DEST/DEST/.streamload-tokenize/staging/…`` (the folder was joined into the writer's prefix
twice) and the rename step skipped the missing file silently; ``file://`` destinations made a
folder named ``file:``. Each case runs the real CLI from a working directory set by
``monkeypatch.chdir`` and checks the published files, their tokens and a rerun.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streamload.cli.main import main
from streamload.errors import ConfigError, FormatError
from streamload.tokenize import DocumentEncoder, TokenizeConfig
from streamload.tokenize.markers import RunRecord
from tests.tokenize.test_tokenize import (  # noqa: F401 - the fixture
    read_documents,
    sentences,
    tokenizer_path,
    write_jsonl,
)

SUFFIXES = {
    "dolma": (".csv.gz", ".npy"),
    "megatron": (".bin", ".idx"),
    "modalities": (".pbin",),
    "numpy": (".npy",),
    "datatrove": (".ds", ".ds.index", ".ds.metadata"),
}
"""What one part of each format is made of."""

SPELLINGS = ("relative", "absolute", "dot", "dotdot", "file-url")


def spell(kind: str, root: Path) -> tuple[str, Path]:
    """The ``--destination`` argument of a spelling, and the folder it must name (the
    working directory is ``root / "cwd"``)."""
    if kind == "relative":
        return "out/sub", root / "cwd" / "out" / "sub"
    if kind == "absolute":
        return str(root / "abs"), root / "abs"
    if kind == "dot":
        return "./dot", root / "cwd" / "dot"
    if kind == "dotdot":
        return "../up", root / "up"
    return f"file://{root / 'url'}", root / "url"


def visible_tree(root: Path) -> list[str]:
    """Every non-hidden path under ``root`` (hidden folders are not entered)."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        rel = os.path.relpath(folder, root)
        found += [os.path.normpath(os.path.join(rel, n)) for n in dirs + files if n[0] != "."]
    return sorted(found)


@pytest.mark.parametrize("kind", SPELLINGS)
@pytest.mark.parametrize("fmt", list(SUFFIXES))
def test_every_format_publishes_exactly_at_the_destination(
    tokenizer_path: str,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    fmt: str,
    kind: str,
) -> None:
    (tmp_path / "cwd").mkdir()
    texts = sentences(12, 3)
    write_jsonl(tmp_path / "cwd" / "in.jsonl", texts)
    monkeypatch.chdir(tmp_path / "cwd")
    argument, folder = spell(kind, tmp_path)
    command = ["tokenize", "--documents", "in.jsonl", "--destination", argument,
               "--tokenizer", tokenizer_path, "--eos-token-id", "0", "--format", fmt,
               "--batch-size", "5", "--no-progress"]  # fmt: skip
    assert main(command) == 0
    names = sorted(f"part-0-00000{s}" for s in SUFFIXES[fmt])
    assert f"in {len(names)} files under {folder}:" in capsys.readouterr().out
    assert visible_tree(folder) == names
    # nothing anywhere else: no DEST/DEST, no folder called "file:", no stray staging
    assert visible_tree(tmp_path) == sorted(
        {os.path.relpath(folder / n, tmp_path) for n in names}
        | {os.path.relpath(p, tmp_path) for p in _parents(folder, tmp_path)}
        | {"cwd", "cwd/in.jsonl"}
    )
    staging = folder / ".streamload-tokenize" / "staging"
    assert not staging.exists() or not any(staging.iterdir())
    expected = [d.tolist() for d in DocumentEncoder(tokenizer_path, None, 0).encode(texts)]
    got = read_documents(folder, fmt, dtype="uint16" if fmt == "numpy" else "auto")
    assert sorted(got) == sorted(expected)

    before = {n: (folder / n).read_bytes() for n in names}
    assert main(command) == 0  # a rerun: the group is done, nothing changes
    assert "0 groups written, 1 already done" in capsys.readouterr().out
    assert visible_tree(folder) == names
    assert {n: (folder / n).read_bytes() for n in names} == before


def _parents(folder: Path, root: Path) -> list[Path]:
    """The folders between ``root`` (excluded) and ``folder`` (included)."""
    out = []
    while folder != root:
        out.append(folder)
        folder = folder.parent
    return out


def test_spellings_of_one_folder_are_one_run(
    tokenizer_path: str,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The destination is normalized once, at the config: ``out``, ``./out``, its absolute
    path and its ``file://`` URL are the same folder, so a restart under another spelling
    resumes instead of being refused."""
    write_jsonl(tmp_path / "in.jsonl", sentences(8, 4))
    monkeypatch.chdir(tmp_path)
    base = {"documents": ("in.jsonl",), "tokenizer": tokenizer_path, "eos_token_id": 0}
    spellings = ["out", "./out", str(tmp_path / "out"), f"file://{tmp_path / 'out'}", "x/../out"]
    configs = [TokenizeConfig(**base, destination=d) for d in spellings]  # type: ignore[arg-type]
    assert {c.destination for c in configs} == {str(tmp_path / "out")}
    wd = TokenizeConfig(**base, destination="out", work_dir_output="./scratch")  # type: ignore[arg-type]
    assert wd.work_dir_output == str(tmp_path / "scratch")


@pytest.mark.parametrize("field", ["destination", "work_dir_output"])
def test_a_remote_destination_is_refused_not_written_locally(
    tokenizer_path: str,  # noqa: F811
    field: str,
) -> None:
    """Outputs are written with local file operations: ``s3://b/x`` used to become a local
    folder ``s3:/b/x``."""
    base = {"documents": ("in.jsonl",), "tokenizer": tokenizer_path, "eos_token_id": 0,
            "destination": "out"}  # fmt: skip
    with pytest.raises(ConfigError, match=rf"{field} = 's3://bucket/x': .*local folder"):
        TokenizeConfig(**{**base, field: "s3://bucket/x"})  # type: ignore[arg-type]


def test_relative_work_dir_output_publishes_into_the_destination(
    tokenizer_path: str,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write_jsonl(tmp_path / "in.jsonl", sentences(8, 5))
    monkeypatch.chdir(tmp_path)
    for fmt in ("numpy", "megatron"):
        command = ["tokenize", "--documents", "in.jsonl", "--destination", f"o-{fmt}",
                   "--work-dir.output", "scratch", "--tokenizer", tokenizer_path,
                   "--eos-token-id", "0", "--format", fmt, "--no-progress"]  # fmt: skip
        assert main(command) == 0
        assert visible_tree(tmp_path / f"o-{fmt}") == [f"part-0-00000{s}" for s in SUFFIXES[fmt]]
    # one staging folder per destination, emptied
    assert [files for _, _, files in os.walk(tmp_path / "scratch")] == [[], [], []]


def test_publish_refuses_a_missing_or_an_unexpected_file(tmp_path: Path) -> None:
    """The publish step never skips silently: a file the writer reported but the staging
    folder lacks (removed by another process, or written elsewhere) is an error naming it,
    and so is a file nobody wrote; nothing is published and the group is not marked done."""
    record = RunRecord(str(tmp_path / "dst"))
    stats = {"documents": 1, "tokens": 3, "empty": 0, "bad": 0, "bad_examples": []}
    staging = record.staging(0)
    Path(staging, "part-0-00000.npy").write_bytes(b"tokens")
    expected = ["part-0-00000.csv.gz", "part-0-00000.npy"]
    with pytest.raises(FormatError, match=r"part-0-00000.csv.gz.* missing"):
        record.finish(0, staging, expected, stats)
    with pytest.raises(FormatError, match=r"part-0-00000.npy.* not written by this run"):
        record.finish(0, staging, [], stats)
    assert not (tmp_path / "dst" / "part-0-00000.npy").exists()
    assert record.done(0) is None


@pytest.mark.parametrize("option", ["--destination", "--work-dir.output"])
def test_an_output_folder_that_is_a_file_is_refused_before_any_work(
    tokenizer_path: str,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    option: str,
) -> None:
    write_jsonl(tmp_path / "in.jsonl", sentences(4, 6))
    (tmp_path / "file").write_text("not a folder")
    folders = {"--destination": str(tmp_path / "out"), "--work-dir.output": str(tmp_path / "w")}
    folders[option] = str(tmp_path / "file")
    command = ["tokenize", "--documents", str(tmp_path / "in.jsonl"), "--tokenizer",
               tokenizer_path, "--eos-token-id", "0", "--no-progress",
               *(x for item in folders.items() for x in item)]  # fmt: skip
    assert main(command) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "file") in err and "cannot" in err
    assert (tmp_path / "file").read_text() == "not a folder"


def test_runs_into_two_destinations_do_not_share_staging(tmp_path: Path) -> None:
    """With one ``--work-dir.output`` for two destinations, a group's staging folder of one
    run used to be the other's (``W/group-0``), emptied when the other started it."""
    scratch = str(tmp_path / "scratch")
    first = RunRecord(str(tmp_path / "a"), scratch).staging(0)
    Path(first, "part-0-00000.npy").write_bytes(b"being written")
    second = RunRecord(str(tmp_path / "b"), scratch).staging(0)
    assert second != first
    assert Path(first, "part-0-00000.npy").read_bytes() == b"being written"
