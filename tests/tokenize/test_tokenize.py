"""``streamload tokenize``: dolma's rules, every output format, bad input, splits and dtypes."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from streamload.catalog.sources import describe_source
from streamload.cli.main import main
from streamload.config import SourceConfig
from streamload.errors import ConfigError, FormatError
from streamload.formats.registry import open_shard
from streamload.tokenize import DocumentEncoder, TokenizeConfig, plan_run, tokenize
from streamload.tokenize.shuffle import group_files, ring_batches
from streamload.tools.documents import document_bounds, iter_documents
from tests.helpers.tokenizer import train_bpe

WORDS = [
    *("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog"),
    *("data", "stream", "load", "token", "shard"),
]


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30))) for _ in range(n)]


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A 300-id byte-level BPE trained in well under a second (EOS = 0, BOS = 1)."""
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    train_bpe(path, sentences(300, 0))
    return str(path)


def write_jsonl(path: Path, texts: list[str], prefix: str = "d") -> None:
    lines = [json.dumps({"id": f"{prefix}{i}", "text": t}) + "\n" for i, t in enumerate(texts)]
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as fh:
        fh.writelines(lines)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """Four input files of 30 documents each (one gzip)."""
    folder = tmp_path / "in"
    folder.mkdir()
    for f in range(4):
        name = f"f{f}.jsonl" + (".gz" if f == 3 else "")
        write_jsonl(folder / name, sentences(30, 10 + f), prefix=f"f{f}-")
    return folder


def run(tokenizer: str, docs: str, dst: Path, **options: object) -> TokenizeConfig:
    config = TokenizeConfig(
        documents=(docs,),
        destination=str(dst),
        tokenizer=tokenizer,
        **options,  # type: ignore[arg-type]
    )
    tokenize(config)
    return config


def read_documents(dst: Path, fmt: str, dtype: str = "auto") -> list[list[int]]:
    """Every document of an output folder, read back through streamload's readers."""
    patterns = {"megatron": "*.bin", "modalities": "*.pbin", "datatrove": "*.ds"}
    source = SourceConfig(
        name="t", path=str(dst / patterns.get(fmt, "*.npy")), format="auto", dtype=dtype
    )
    docs = []
    for info in describe_source(source, vocab_size=300).shards:
        shard = open_shard(info)
        bounds = document_bounds(shard, 0)
        docs.extend(d.tolist() for d in iter_documents(shard, bounds))
    return docs


def test_encoder_adds_bos_eos_only_when_absent(tokenizer_path: str) -> None:
    enc = DocumentEncoder(tokenizer_path, 1, 0)
    plain, with_eos, with_bos = enc.encode(["fox", "fox<|endoftext|>", "<|bos|>fox"])
    assert plain[0] == 1 and plain[-1] == 0
    assert with_eos.tolist() == plain.tolist()
    assert with_bos.tolist() == plain.tolist()
    assert (
        DocumentEncoder(tokenizer_path, None, 0).encode(["fox"])[0].tolist() == plain[1:].tolist()
    )


def test_segmenting_keeps_the_ids_of_a_tokenizer_without_prefix(tokenizer_path: str) -> None:
    text = "the fox\n\nover a lazy dog\nload"
    whole = DocumentEncoder(tokenizer_path, None, 0).encode([text])[0]
    parts = DocumentEncoder(tokenizer_path, None, 0, segment_before_tokenization=True)
    assert parts.encode([text])[0].tolist() == whole.tolist()


def test_ring_reads_round_robin_from_the_end_of_the_group() -> None:
    files = {"a": ["a1", "a2"], "b": ["b1", "b2", "b3"], "c": ["c1"]}
    batches = list(ring_batches(["a", "b", "c"], files.__getitem__, 2, 4))
    # c and b open first; c ends on step 2 (the step is used), a joins the ring's end
    assert batches == [["c1", "b1", "a1"], ["b2", "a2", "b3"]]


def test_groups_follow_dolma_step_rule() -> None:
    files = [f"f{i}" for i in range(5)]
    groups = group_files(files, 3, processes=2, files_per_process=None)
    assert [len(g) for g in groups] == [2, 3]  # step 2.5, bounds rounded half to even
    assert sorted(f for g in groups for f in g) == files
    assert [len(g) for g in group_files(files, 3, 1, 2)] == [2, 2, 1]


@pytest.mark.parametrize("fmt", ["dolma", "megatron", "modalities", "numpy", "datatrove"])
def test_every_format_holds_every_document_once(
    tokenizer_path: str, corpus: Path, tmp_path: Path, fmt: str
) -> None:
    dst = tmp_path / "out"
    run(tokenizer_path, str(corpus / "f*"), dst, eos_token_id=0, format=fmt, batch_size=7)
    enc = DocumentEncoder(tokenizer_path, None, 0)
    texts = [t for f in range(4) for t in sentences(30, 10 + f)]
    expected = enc.encode(texts)
    got = read_documents(dst, fmt, dtype="uint16" if fmt == "numpy" else "auto")
    assert sorted(got) == sorted(e.tolist() for e in expected)


def test_max_size_rolls_files_without_splitting_documents(
    tokenizer_path: str, corpus: Path, tmp_path: Path
) -> None:
    dst = tmp_path / "out"
    run(tokenizer_path, str(corpus / "f0.jsonl"), dst, eos_token_id=0, max_size=100)
    parts = sorted(dst.glob("part-0-*.npy"))
    assert len(parts) > 3
    assert all(p.stat().st_size < 200 for p in parts)  # fewer than 100 uint16 tokens
    docs = read_documents(dst, "dolma")
    assert len(docs) == 30 and all(d[-1] == 0 for d in docs)


@pytest.mark.slow
def test_output_is_a_function_of_the_seed_not_of_processes(
    tokenizer_path: str, corpus: Path, tmp_path: Path
) -> None:
    for name, seed, processes in (("a", 5, 1), ("b", 5, 2), ("c", 6, 1)):
        run(tokenizer_path, str(corpus / "f*"), tmp_path / name, eos_token_id=0, seed=seed,
            batch_size=8, processes=processes, files_per_process=2)  # fmt: skip
    a, b, c = (sorted((tmp_path / n).glob("part-*.npy")) for n in "abc")
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    assert [p.read_bytes() for p in a] != [p.read_bytes() for p in c]


def test_empty_and_whitespace_texts_are_skipped(tokenizer_path: str, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "x.jsonl", ["  a fox  ", "", " \n\t", "dog"])
    capsys_dst = tmp_path / "out"
    run(tokenizer_path, str(tmp_path / "x.jsonl"), capsys_dst, eos_token_id=0, batch_size=1,
        ring_size=1)  # fmt: skip
    enc = DocumentEncoder(tokenizer_path, None, 0)
    assert read_documents(capsys_dst, "dolma") == [d.tolist() for d in enc.encode(["a fox", "dog"])]


def test_bad_line_names_file_and_line_or_is_counted(
    tokenizer_path: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "1", "text": "fox"}\n{"id": "2", "text": \n{"id": "3"}\n')
    base = ["tokenize", "--documents", str(path), "--tokenizer", tokenizer_path,
            "--eos-token-id", "0", "--no-progress", "--destination"]  # fmt: skip
    assert main([*base, str(tmp_path / "a")]) == 2
    assert f"{path}: line 2 is not valid JSON" in capsys.readouterr().err
    assert not list((tmp_path / "a").glob("part-*"))
    assert main([*base, str(tmp_path / "b"), "--skip-bad-lines"]) == 0
    out = capsys.readouterr().out
    assert "skipped 2 bad lines" in out and "line 3 has no text field 'text'" in out
    assert len(read_documents(tmp_path / "b", "dolma")) == 1


def test_dtype_too_small_fails_before_any_work(
    tokenizer_path: str, corpus: Path, tmp_path: Path
) -> None:
    config = TokenizeConfig(
        documents=(str(corpus / "f0.jsonl"),), destination=str(tmp_path / "o"),
        tokenizer=tokenizer_path, eos_token_id=0, dtype="uint8",
    )  # fmt: skip
    with pytest.raises(ConfigError, match="uint8 holds ids up to 255 but the tokenizer has 300"):
        plan_run(config)
    assert not (tmp_path / "o").exists()
    bad = {"documents": (str(corpus / "f0.jsonl"),), "destination": str(tmp_path / "o"),
           "tokenizer": tokenizer_path, "eos_token_id": 0}  # fmt: skip
    with pytest.raises(ConfigError, match="datatrove stores unsigned tokens of 2 or 4 bytes"):
        plan_run(TokenizeConfig(**bad, format="datatrove", dtype="int32"))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="no megatron-core code"):
        plan_run(TokenizeConfig(**bad, format="megatron", dtype="uint32"))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="at least one"):
        TokenizeConfig(**{**bad, "eos_token_id": None})  # type: ignore[arg-type]


def test_shards_split_groups_disjointly_into_one_destination(
    tokenizer_path: str, corpus: Path, tmp_path: Path
) -> None:
    whole, split = tmp_path / "whole", tmp_path / "split"
    opts = {"eos_token_id": 0, "files_per_process": 1, "batch_size": 5}
    run(tokenizer_path, str(corpus / "f*"), whole, **opts)
    for i in range(3):
        run(tokenizer_path, str(corpus / "f*"), split, shard_index=i, num_shards=3, **opts)
    names = sorted(p.name for p in whole.glob("part-*"))
    assert names == sorted(p.name for p in split.glob("part-*")) and len(names) == 8
    for name in names:
        assert (whole / name).read_bytes() == (split / name).read_bytes()


def test_restart_skips_done_groups_and_other_arguments_are_refused(
    tokenizer_path: str, corpus: Path, tmp_path: Path
) -> None:
    dst = tmp_path / "out"
    opts = {"eos_token_id": 0, "files_per_process": 1}
    run(tokenizer_path, str(corpus / "f*"), dst, **opts)
    config = TokenizeConfig(documents=(str(corpus / "f*"),), destination=str(dst),
                            tokenizer=tokenizer_path, **opts)  # type: ignore[arg-type]  # fmt: skip
    plan = plan_run(config)
    assert plan.todo == () and len(plan.done) == 4
    (dst / "part-2-00000.npy").unlink()  # a lost output: its group is redone
    assert plan_run(config).todo == (2,)
    with pytest.raises(ConfigError, match="holds a tokenize run whose config"):
        plan_run(TokenizeConfig(**{**config.to_dict(), "seed": 1}))  # type: ignore[arg-type]


def test_config_file_uses_dolma_names(tokenizer_path: str, corpus: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({
        "documents": [str(corpus / "f1.jsonl")], "destination": str(tmp_path / "o"),
        "tokenizer": {"name_or_path": tokenizer_path, "eos_token_id": 0},
        "work_dir": {"input": str(tmp_path / "wi"), "output": str(tmp_path / "wo")},
        "max_size": 1000,
    }))  # fmt: skip
    assert main(["tokenize", "-c", str(cfg), "--dryrun"]) == 0
    assert not (tmp_path / "o").exists()
    assert main(["tokenize", "-c", str(cfg), "--format", "megatron", "--no-progress"]) == 0
    assert len(read_documents(tmp_path / "o", "megatron")) == 30


def test_document_too_long_for_max_size_is_an_error(tokenizer_path: str, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "x.jsonl", [" ".join(WORDS * 5)])
    with pytest.raises(FormatError, match=r"x.jsonl: line 1 \(id 'd0'\) has \d+ tokens"):
        run(tokenizer_path, str(tmp_path / "x.jsonl"), tmp_path / "o", eos_token_id=0, max_size=10)


def test_zstd_and_gzip_inputs_read_like_plain(tokenizer_path: str, tmp_path: Path) -> None:
    zstandard = pytest.importorskip("zstandard", reason="needs zstandard (streamload[tokenizers])")

    texts = sentences(12, 7)
    write_jsonl(tmp_path / "p.jsonl", texts)
    plain = (tmp_path / "p.jsonl").read_bytes()
    (tmp_path / "z.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(plain))
    (tmp_path / "g.jsonl.gz").write_bytes(gzip.compress(plain))
    outputs = []
    for name in ("p.jsonl", "z.jsonl.zst", "g.jsonl.gz"):
        run(tokenizer_path, str(tmp_path / name), tmp_path / f"o-{name}", eos_token_id=0,
            batch_size=1, ring_size=1)  # fmt: skip
        outputs.append(read_documents(tmp_path / f"o-{name}", "dolma"))
    assert outputs[0] == outputs[1] == outputs[2] and len(outputs[0]) == 12
