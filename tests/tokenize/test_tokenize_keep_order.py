"""``streamload tokenize --keep-order``: documents in input order, one group per input file.

Twelve input files, listed out of name order, hold documents of varied lengths; a small
``max_size`` splits most files into several parts. The output, read back through streamload's
own readers, must be the inputs encoded in order by :class:`DocumentEncoder`, and its part
files must list (sorted by name) in input order.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from streamload.catalog.sources import describe_source
from streamload.cli.main import main
from streamload.config import SourceConfig
from streamload.errors import ConfigError
from streamload.formats.encoder import DocumentEncoder
from streamload.formats.registry import open_shard
from streamload.tokenize import TokenizeConfig, plan_run, tokenize
from streamload.tokenize.config import flatten_options
from streamload.tokenize.run import run_plan
from streamload.tools.documents import document_bounds, iter_documents
from tests.helpers.paths import TESTS

GOLDEN = TESTS / "golden" / "tokenize"
TOKENIZER = str(GOLDEN / "tokenizer.json")
WORDS = ("the", "fox", "naïve", "café", "日本", "data", "stream", "shard", "lazy", "over")
NAMES = ("k", "b", "j", "a", "l", "c", "i", "d", "h", "e", "g", "f")  # listed out of name order
MAX_SIZE = 1500  # tokens per output file: most inputs take several parts
BOS, EOS = 1, 0


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[str]]:
    """Twelve JSONL files (listing order) and their texts in that order."""
    folder = tmp_path_factory.mktemp("in")
    rng = random.Random(32)
    files, texts = [], []
    for name in NAMES:
        path = folder / f"{name}.jsonl"
        lines = []
        for i in range(rng.randint(5, 40)):
            words = rng.choices(WORDS, k=rng.choice((1, 2, rng.randint(3, 60), 200)))
            lines.append(json.dumps({"id": f"{name}{i}", "text": " ".join(words)}) + "\n")
            texts.append(" ".join(words))
        path.write_text("".join(lines), encoding="utf-8")
        files.append(str(path))
    return files, texts


def config(files: list[str], dst: Path, **options: object) -> TokenizeConfig:
    return TokenizeConfig(
        documents=tuple(files),
        destination=str(dst),
        tokenizer=TOKENIZER,
        bos_token_id=BOS,
        eos_token_id=EOS,
        max_size=MAX_SIZE,
        keep_order=True,
        **options,  # type: ignore[arg-type]
    )


def cli(files: list[str], dst: Path, *extra: str) -> int:
    return main(
        ["tokenize", "--documents", *files, "--destination", str(dst), "--tokenizer", TOKENIZER,
         "--bos-token-id", str(BOS), "--eos-token-id", str(EOS), "--max-size", str(MAX_SIZE),
         "--no-progress", *extra]
    )  # fmt: skip


def outputs(dst: Path) -> dict[str, bytes]:
    """Every output file's bytes (the run's own records aside)."""
    return {p.name: p.read_bytes() for p in sorted(dst.iterdir()) if p.is_file()}


def read_documents(dst: Path, pattern: str) -> list[list[int]]:
    """The documents of the output folder, part files in name order, by streamload's readers."""
    dtype = "uint16" if pattern == "*.npy" else "auto"  # headerless dolma files
    source = SourceConfig(name="t", path=str(dst / pattern), format="auto", dtype=dtype)
    docs = []
    for info in describe_source(source, vocab_size=300).shards:
        shard = open_shard(info)
        docs.extend(d.tolist() for d in iter_documents(shard, document_bounds(shard, 0)))
    return docs


def expected_documents(texts: list[str]) -> list[list[int]]:
    encoder = DocumentEncoder(TOKENIZER, BOS, EOS)
    return [a.tolist() for a in encoder.encode([t.strip() for t in texts])]


@pytest.mark.parametrize(("fmt", "pattern"), [("megatron", "*.bin"), ("dolma", "*.npy")])
def test_output_is_the_inputs_encoded_in_order(
    inputs: tuple[list[str], list[str]], tmp_path: Path, fmt: str, pattern: str
) -> None:
    files, texts = inputs
    dst = tmp_path / "out"
    tokenize(config(files, dst, format=fmt, batch_size=7))
    assert read_documents(dst, pattern) == expected_documents(texts)
    # part-{G}: G is the input's position, zero-padded so that part-10 sorts after part-02
    names = sorted(p.name for p in dst.glob(pattern))
    groups = [int(n.split("-")[1]) for n in names]
    assert groups == sorted(groups)
    assert sorted(set(groups)) == list(range(len(files)))
    assert names[-1].startswith("part-11-") and "part-02-00000" + pattern[1:] in names
    assert len(names) > len(files), "max_size must split some inputs into several parts"


def test_dolma_rows_name_each_document_s_source_line_in_order(
    inputs: tuple[list[str], list[str]], tmp_path: Path
) -> None:
    import csv
    import gzip
    import io

    files, _ = inputs
    dst = tmp_path / "out"
    tokenize(config(files, dst))
    rows = []
    for part in sorted(dst.glob("part-*.csv.gz")):
        text = gzip.decompress(part.read_bytes()).decode()
        rows.extend((src, int(loc)) for *_, src, loc in csv.reader(io.StringIO(text)))
    expected = []
    for path in files:
        n = len(Path(path).read_text(encoding="utf-8").splitlines())
        expected.extend((path, line) for line in range(1, n + 1))  # dolma: 1-based
    assert rows == expected


def test_processes_batch_size_and_seed_do_not_change_the_bytes(
    inputs: tuple[list[str], list[str]], tmp_path: Path
) -> None:
    files, _ = inputs
    assert cli(files, tmp_path / "one", "--keep-order", "--format", "megatron") == 0
    assert cli(files, tmp_path / "two", "--keep_order", "--format", "megatron",
               "--processes", "2", "--batch-size", "3", "--seed", "7") == 0  # fmt: skip
    one = outputs(tmp_path / "one")
    assert one == outputs(tmp_path / "two")
    assert len(one) > 2 * len(files)


def test_an_interrupted_run_resumes_to_the_same_bytes(
    inputs: tuple[list[str], list[str]], tmp_path: Path
) -> None:
    files, _ = inputs
    tokenize(config(files, tmp_path / "clean", format="megatron", batch_size=4))
    dst = tmp_path / "resumed"
    calls = 0

    def stop(documents: int, tokens: int) -> None:  # dies mid-group, after some groups
        nonlocal calls
        calls += 1
        if calls == 40:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_plan(plan_run(config(files, dst, format="megatron", batch_size=4)), stop)
    done = dst / ".streamload-tokenize" / "done"
    assert 0 < len(list(done.iterdir())) < len(files)
    # batch_size and processes are not part of a keep_order run's record: both may change
    tokenize(config(files, dst, format="megatron", batch_size=9, processes=2))
    assert outputs(dst) == outputs(tmp_path / "clean")


def test_shards_of_the_run_write_the_same_files(
    inputs: tuple[list[str], list[str]], tmp_path: Path
) -> None:
    files, _ = inputs
    tokenize(config(files, tmp_path / "whole"))
    for shard in range(3):
        tokenize(config(files, tmp_path / "sharded", shard_index=shard, num_shards=3))
    assert outputs(tmp_path / "sharded") == outputs(tmp_path / "whole")


def test_groups_are_the_files_in_listing_order(
    inputs: tuple[list[str], list[str]], tmp_path: Path
) -> None:
    files, _ = inputs
    plan = plan_run(config(files, tmp_path / "out", processes=5), claim=False)
    assert plan.groups == tuple((f,) for f in files)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--files-per-process", "2"], ["files_per_process = 2"]),
        (["--ring-size", "8"], ["ring_size = 8"]),  # refused even at its default value
        (["--ring_size", "2", "--files_per_process", "1"], ["files_per_process", "ring_size"]),
    ],
)
def test_grouping_options_are_refused_with_keep_order(
    inputs: tuple[list[str], list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    extra: list[str],
    named: list[str],
) -> None:
    files, _ = inputs
    assert cli(files, tmp_path / "out", "--keep-order", *extra) == 2
    err = capsys.readouterr().err
    assert "keep_order cannot be combined with" in err
    assert all(name in err for name in named)
    assert not (tmp_path / "out").exists()


def test_grouping_options_are_refused_in_configs(tmp_path: Path) -> None:
    base = {"documents": ["x.jsonl"], "destination": str(tmp_path), "tokenizer": TOKENIZER,
            "eos_token_id": 0, "keep_order": True}  # fmt: skip
    with pytest.raises(ConfigError, match=r"keep_order .* ring_size = 8"):
        TokenizeConfig.from_dict(flatten_options({**base, "ring-size": 8}))
    with pytest.raises(ConfigError, match=r"keep_order .* ring_size = 3"):
        TokenizeConfig(**{**base, "ring_size": 3})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"keep_order .* files_per_process = 1"):
        TokenizeConfig.from_dict({**base, "files_per_process": 1})
    with pytest.raises(ConfigError, match="keep_order"):
        TokenizeConfig.from_dict({**base, "keep_order": "yes"})
    # without keep_order both are dolma's options as before
    assert TokenizeConfig.from_dict({**base, "keep_order": False, "ring_size": 3}).ring_size == 3


def test_config_file_key_and_dryrun_show_keep_order(
    inputs: tuple[list[str], list[str]], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    files, _ = inputs
    conf = tmp_path / "tok.json"
    conf.write_text(json.dumps({"keep_order": True, "processes": 3}))
    assert cli(files, tmp_path / "out", "-c", str(conf), "--dryrun") == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["keep_order"] is True
    assert shown["groups"] == len(files) == shown["files"]
    assert not (tmp_path / "out").exists()


def test_a_restart_with_the_other_order_is_refused(
    inputs: tuple[list[str], list[str]], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    files, _ = inputs
    dst = tmp_path / "out"
    assert cli(files, dst, "--keep-order", "--seed", "5") == 0
    record = json.loads((dst / ".streamload-tokenize" / "run.json").read_text())
    assert record["config"]["keep_order"] is True
    assert not {"seed", "batch_size", "ring_size", "processes"} & set(record["config"])
    assert cli(files, dst, "--keep-order", "--seed", "6") == 0  # the seed is unused
    capsys.readouterr()
    assert cli(files, dst) == 2
    assert "holds a tokenize run whose config is" in capsys.readouterr().err
    shuffled = tmp_path / "shuffled"
    assert cli(files, shuffled) == 0
    capsys.readouterr()
    assert cli(files, shuffled, "--keep-order") == 2
    assert "holds a tokenize run whose config is" in capsys.readouterr().err


def test_a_default_run_records_what_it_did_before_keep_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A destination written before ``keep_order`` existed still resumes: same record."""
    for name in ("docs.jsonl", "more.jsonl.gz", "tokenizer.json"):
        shutil.copy(GOLDEN / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    assert main(["tokenize", "--documents", "docs.jsonl", "more.jsonl.gz", "--destination",
                 "out", "--tokenizer", "tokenizer.json", "--eos-token-id", "0",
                 "--skip-bad-lines", "--no-progress"]) == 0  # fmt: skip
    record = json.loads((tmp_path / "out" / ".streamload-tokenize" / "run.json").read_text())
    assert record["config"] == {  # as written by streamload before keep_order
        "batch_size": 10000, "bos_token_id": None, "documents": ["docs.jsonl", "more.jsonl.gz"],
        "dtype": "auto", "eos_token_id": 0, "files_per_process": None, "format": "dolma",
        "id_field": "id", "max_size": 1073741824, "num_shards": 1, "pad_token_id": None,
        "processes": 1, "ring_size": 8, "seed": 3920, "segment_before_tokenization": False,
        "skip_bad_lines": True, "text_field": "text", "tokenizer": "tokenizer.json",
    }  # fmt: skip
    assert record["groups"] == 1
