"""Documents of every input kind (JSONL, Parquet, Arrow IPC, MDS) by one set of rules:
``open_documents`` on the fixtures the real tools wrote (tests/fixtures/text) gives their
texts in order, bad rows are refused naming file, row and field (or skipped and counted),
and ``streamload tokenize`` writes the same tokens from Parquet as from the same JSONL."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import fsspec
import pytest

from streamload.cli.main import main
from streamload.errors import ConfigError, FormatError
from streamload.tokenize.inputs import (
    TEXT_SUFFIXES,
    LineReader,
    TableReader,
    expand_documents,
    input_kind,
    open_documents,
)
from tests.tokenize.test_tokenize import read_documents, run

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "text"
TOKENIZER = str(ROOT / "golden" / "tokenize" / "tokenizer.json")
EXPECTED: dict[str, list[dict[str, Any]]] = json.loads(
    (FIXTURES / "expected.json").read_text(encoding="utf-8")
)["files"]


def documents(path: str, **options: Any) -> list[tuple[str, str, int]]:
    reader = open_documents(path, options.pop("text_field", "text"), "id", **options)
    return [(d.text, d.id, d.loc) for d in reader]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_fixture_gives_the_tools_texts_in_order(name: str) -> None:
    path = str(FIXTURES / name)
    rows = EXPECTED[name]
    reader = open_documents(path, "text", "id")
    assert isinstance(reader, LineReader if input_kind(path) == "jsonl" else TableReader)
    got = [(d.text, d.id, d.src, d.loc, d.trained) for d in reader]
    want = [(r["text"].strip(), str(r["id"]), path, n, None)
            for n, r in enumerate(rows, 1) if r["text"].strip()]  # fmt: skip
    assert got == want
    empty = sum(not r["text"].strip() for r in rows)
    assert (reader.counts.lines, reader.counts.documents) == (len(rows), len(rows) - empty)
    assert (reader.counts.empty, reader.counts.bad) == (empty, 0)


def test_every_kind_holds_the_same_documents() -> None:
    """The twelve texts, one whitespace-only: eleven documents in every kind."""
    whole = ["jsonl/docs.jsonl", "jsonl/docs.jsonl.zst", "to_parquet/train.parquet",
             "ipc_file/text.arrow", "mds/mixed/shard.00000.mds"]  # fmt: skip
    split = [["save_to_disk/data-00000-of-00002.arrow", "save_to_disk/data-00001-of-00002.arrow"],
             ["mds/zstd/shard.00000.mds.zstd", "mds/zstd/shard.00001.mds.zstd"]]  # fmt: skip
    texts = [[t for t, _, _ in documents(str(FIXTURES / n))] for n in whole]
    texts += [[t for n in names for t, _, _ in documents(str(FIXTURES / n))] for names in split]
    assert len(texts[0]) == 11 and all(t == texts[0] for t in texts)
    assert "Café naïve — 東京 🚀 Grüße, ünïcödé text." in texts[0]


@pytest.mark.parametrize(
    "name", ["jsonl/docs.jsonl.gz", "to_parquet/train.parquet", "mds/mixed/shard.00000.mds"]
)
def test_a_dotted_field_reaches_into_structs_and_json(name: str) -> None:
    got = documents(str(FIXTURES / name), text_field="meta.lang")
    assert [t for t, _, _ in got] == ["mixed" if i == 4 else "en" for i in range(12)]


@pytest.mark.parametrize("name", ["ipc_file/text.arrow", "jsonl/docs.jsonl"])
def test_without_an_id_field_ids_are_dolmas_path_hash_and_number(name: str) -> None:
    path = str(FIXTURES / name)
    digest = hashlib.sha256(path.encode()).hexdigest()
    got = [d.id for d in open_documents(path, "text", None)]
    assert got == [f"{digest}-{n}" for n in range(1, 13) if n != 4]


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("a.jsonl", "jsonl"), ("s3://b/a.json.gz", "jsonl"), ("a.ndjson.zstd", "jsonl"),
        ("A.JSONL.ZST", "jsonl"), ("a.jsonl.bz2", "jsonl"), ("a.json.xz", "jsonl"),
        ("d/train-0.parquet", "parquet"), ("data-00000-of-00002.arrow", "arrow"),
        ("shard.00000.mds", "mds"), ("shard.00000.mds.zstd", "mds"), ("x.mds.gz", "mds"),
    ],
)  # fmt: skip
def test_input_kind_is_named_by_the_suffix(path: str, kind: str) -> None:
    assert input_kind(path) == kind
    assert path.lower().endswith(TEXT_SUFFIXES)


@pytest.mark.parametrize("path", ["a.txt", "a.csv", "a.jsonl.zip", "shard.00000.mds.br", "a"])
def test_an_unknown_suffix_is_a_config_error_naming_the_file(path: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{path}: not a file of documents by its name; "):
        input_kind(path)
    with pytest.raises(ConfigError, match=r"known suffixes: \.jsonl, \.json, \.ndjson"):
        open_documents(path, "text", "id")


def test_expanding_patterns_refuses_an_unknown_file_before_any_work(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text("{}\n")
    (tmp_path / "notes.txt").write_text("x\n")
    assert expand_documents((str(tmp_path / "*.jsonl"),)) == [str(tmp_path / "a.jsonl")]
    with pytest.raises(ConfigError, match=r"notes\.txt: not a file of documents"):
        expand_documents((str(tmp_path / "*"),))


@pytest.mark.parametrize(
    ("name", "field", "option", "have"),
    [
        ("to_parquet/train.parquet", "content", "text_field", "text, id, meta"),
        ("save_to_disk/data-00000-of-00002.arrow", "body.text", "text_field", "text, id, meta"),
        ("mds/plain/shard.00001.mds", "content", "text_field", "id, text"),
    ],
)
def test_a_missing_text_column_names_file_columns_and_option(
    name: str, field: str, option: str, have: str
) -> None:
    path = str(FIXTURES / name)
    column = field.split(".")[0]
    message = f"{path} has no column '{column}' (its columns: {have}); set {option}"
    with pytest.raises(FormatError) as info:
        list(open_documents(path, field, "id", skip_bad_lines=True))
    assert str(info.value) == message


def test_a_missing_id_or_spans_column_names_its_option() -> None:
    path = str(FIXTURES / "ipc_file/text.arrow")
    with pytest.raises(FormatError, match=r"has no column 'doc_id' .*; set id_field$"):
        list(open_documents(path, "text", "doc_id"))
    with pytest.raises(FormatError, match=r"has no column 'spans' .*; set loss_spans_field$"):
        list(open_documents(path, "text", "id", loss_spans_field="spans"))


def write_table(path: Path, columns: dict[str, list[Any]]) -> str:
    """``columns`` as a Parquet file (row groups of 2) or an Arrow IPC stream (batches of 3)."""
    table = pa.table(columns)
    if path.suffix == ".parquet":
        pq.write_table(table, path, row_group_size=2)
    else:
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table, max_chunksize=3)
    return str(path)


def bad_table(tmp_path: Path, suffix: str) -> str:
    """Row 2 has a null text, row 3 an empty one, row 5 a null id; only rows 1 and 5 have a
    ``meta.title``."""
    columns = {
        "text": ["fine", None, "  ", "also fine", "no id"],
        "id": ["a", "b", "c", "d", None],
        "meta": [{"title": "T"}, None, {"title": None}, {"x": 1}, {"title": "U"}],
    }
    return write_table(tmp_path / f"bad{suffix}", columns)


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_null_texts_and_ids_are_bad_rows_naming_file_row_and_field(
    tmp_path: Path, suffix: str
) -> None:
    path = bad_table(tmp_path, suffix)
    with pytest.raises(FormatError) as info:
        list(open_documents(path, "text", "id"))
    assert str(info.value) == (
        f"{path}: row 2 has no text field 'text'; expected a string; fix the row or pass "
        "--skip-bad-lines to skip it"
    )
    reader = open_documents(path, "text", "id", skip_bad_lines=True)
    assert [(d.text, d.id, d.loc) for d in reader] == [("fine", "a", 1), ("also fine", "d", 4)]
    counts = reader.counts
    assert (counts.lines, counts.documents, counts.empty, counts.bad) == (5, 2, 1, 2)
    assert counts.bad_examples == [
        f"{path}: row 2 has no text field 'text'; expected a string",
        f"{path}: row 5 has no id field 'id' (--id-field)",
    ]


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_an_int_text_column_is_a_bad_row_each(tmp_path: Path, suffix: str) -> None:
    path = write_table(tmp_path / f"ints{suffix}", {"text": [7, 8, 9], "id": ["a", "b", "c"]})
    with pytest.raises(FormatError, match=r": row 1 has a int in its text field 'text'; expected"):
        list(open_documents(path, "text", "id"))
    reader = open_documents(path, "text", "id", skip_bad_lines=True)
    assert list(reader) == [] and (reader.counts.lines, reader.counts.bad) == (3, 3)


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_a_missing_nested_field_is_a_bad_row(tmp_path: Path, suffix: str) -> None:
    path = bad_table(tmp_path, suffix)
    with pytest.raises(FormatError, match=r": row 2 has no text field 'meta\.title'; expected"):
        list(open_documents(path, "meta.title", "id"))
    reader = open_documents(path, "meta.title", "id", skip_bad_lines=True)
    assert [(d.text, d.loc) for d in reader] == [("T", 1)]
    assert reader.counts.bad == 4  # rows 2-4 have no title, row 5 no id


def test_tables_and_lines_apply_the_same_rules(tmp_path: Path) -> None:
    """The same objects as JSONL lines and as table rows: equal documents and counts (the
    message says line or row)."""
    rows = [
        {"id": "a", "text": "  keep  ", "spans": [[2, 4]]},
        {"id": "b", "text": None, "spans": [[0, 1]]},
        {"id": "c", "text": "x", "spans": [[0, 9]]},  # past the text: bad spans
        {"id": None, "text": "no id", "spans": []},
        {"id": "e", "text": "last one", "spans": [[0, 4], [5, 8]]},
    ]
    jsonl = tmp_path / "same.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    parquet = tmp_path / "same.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    got = []
    for path in (jsonl, parquet):
        reader = open_documents(str(path), "text", "id", skip_bad_lines=True,
                                loss_spans_field="spans")  # fmt: skip
        docs = [(d.text, d.id, d.loc, d.trained) for d in reader]
        examples = [e.split(": ", 1)[1] for e in reader.counts.bad_examples]
        got.append((docs, reader.counts.lines, reader.counts.bad, examples))
    assert got[0][:3] == got[1][:3] and got[0][2] == 3
    assert [e.replace("line", "row", 1) for e in got[0][3]] == got[1][3]


def test_a_corrupt_parquet_is_a_format_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "broken.parquet"
    path.write_bytes((FIXTURES / "to_parquet/train.parquet").read_bytes()[:1500])
    with pytest.raises(FormatError, match=rf"^{path}: not a readable Parquet file"):
        list(open_documents(str(path), "text", "id", skip_bad_lines=True))


def test_a_missing_file_is_a_format_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "gone.arrow"
    with pytest.raises(FormatError, match=rf"^{path}: cannot read"):
        list(open_documents(str(path), "text", "id"))


def test_an_mds_column_of_a_non_text_encoding_is_refused() -> None:
    path = str(FIXTURES / "mds/mixed/shard.00000.mds")
    with pytest.raises(FormatError, match=r"column 'blob' is encoded 'pkl'"):
        list(open_documents(path, "blob", "id", skip_bad_lines=True))
    ids = [d.id for d in open_documents(path, "text", "id")]  # an int column: str(id)
    assert ids == [str(i) for i in range(12) if i != 3]


def test_remote_inputs_pass_their_storage_options() -> None:
    fs = fsspec.filesystem("memory")
    for name in ("jsonl/docs.jsonl.gz", "mds/plain/index.json", "mds/plain/shard.00000.mds"):
        fs.pipe(f"/inputs-tables/{name}", (FIXTURES / name).read_bytes())
    options = {"skip_instance_cache": True}
    try:
        for name in ("jsonl/docs.jsonl.gz", "mds/plain/shard.00000.mds"):
            url = f"memory://inputs-tables/{name}"
            got = documents(url, storage_options=options)
            assert [t for t, _, _ in got] == [t for t, _, _ in documents(str(FIXTURES / name))]
    finally:
        fs.rm("/inputs-tables", recursive=True)


def test_tokenize_writes_the_same_tokens_from_parquet_as_from_jsonl(tmp_path: Path) -> None:
    outputs = []
    for name in ("jsonl/docs.jsonl", "to_parquet/train.parquet"):
        src = tmp_path / name
        src.parent.mkdir()
        shutil.copy(FIXTURES / name, src)
        dst = tmp_path / f"out-{src.suffix}"
        run(TOKENIZER, str(src), dst, eos_token_id=0, batch_size=4)
        outputs.append((read_documents(dst, "dolma"), sorted(p.name for p in dst.glob("*.npy"))))
        outputs[-1] += ([p.read_bytes() for p in sorted(dst.glob("*.npy"))],)
    (docs, names, data), parquet = outputs
    assert len(docs) == 11 and all(d[-1] == 0 for d in docs)
    assert parquet == (docs, names, data)


def test_a_table_reader_refuses_a_jsonl_file() -> None:
    with pytest.raises(ConfigError, match=r"docs\.jsonl: a JSONL file, not a table"):
        TableReader(str(FIXTURES / "jsonl/docs.jsonl"), "text", "id")


@pytest.mark.parametrize("pattern", ["save_to_disk/*.arrow", "mds/zstd/*.mds.zstd"])
def test_the_cli_tokenizes_arrow_and_mds_inputs(tmp_path: Path, pattern: str) -> None:
    dst = tmp_path / "out"
    argv = ["tokenize", "--documents", str(FIXTURES / pattern), "--tokenizer", TOKENIZER,
            "--eos-token-id", "0", "--no-progress", "--destination", str(dst)]  # fmt: skip
    assert main(argv) == 0
    assert len(read_documents(dst, "dolma")) == 11
