"""streamload's ``save_to_disk`` writer: what ``datasets.load_from_disk`` read, round trips,
file sizes, masks, failures.

``tests/fixtures/hf_streamload/`` holds folders our writer wrote and what
``datasets.load_from_disk`` (5.2.0) returned for them; here they are rewritten by our writer
(the same bytes) and read by our reader (the rows ``datasets`` read), without ``datasets``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamload.catalog.sources import describe_source
from streamload.config import SourceConfig
from streamload.errors import ConfigError
from streamload.formats import open_shard
from streamload.formats.arrow._write import BATCH_ROWS, MASK_COLUMN
from streamload.formats.arrow.folder import MAX_FILE_BYTES, ArrowFolderWriter, data_file_name
from streamload.tools.documents import iter_documents
from streamload.tools.masks import mask_reader
from tests.helpers.paths import TESTS, load_script
from tests.helpers.shards import documents

OURS = TESTS / "fixtures" / "hf_streamload"
SCRIPT = load_script(OURS / "make_fixtures.py")
EXPECTED: dict[str, Any] = json.loads((OURS / "expected.json").read_text())
INTEGERS = ["uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64"]


def read(folder: Path) -> tuple[list[list[int]], list[list[int]]]:
    """Every document of ``folder`` and its loss mask, as streamload reads them."""
    catalog = describe_source(SourceConfig(name="a", path=str(folder)))
    docs: list[list[int]] = []
    masks: list[list[int]] = []
    for info in catalog.shards:
        shard = open_shard(info)
        docs += documents(shard)
        bounds = shard.document_bounds()
        masks += [m.tolist() for m in iter_documents(mask_reader(info), bounds)]
    return docs, masks


def write(folder: Path, docs: list[list[int]], dtype: str, masks: Any = None, **kw: Any) -> Path:
    with ArrowFolderWriter(folder, dtype, save_loss_masks=masks is not None, **kw) as writer:
        for i, doc in enumerate(docs):
            flags = None if masks is None else np.asarray(masks[i], np.uint8)
            writer.add_document(np.asarray(doc, dtype=dtype), loss_mask=flags)
    return folder


def test_datasets_loaded_our_folders() -> None:
    """What ``load_from_disk`` returned: ``List(Value(dtype))`` features, every row, and
    the data files and ``dataset_info.json`` ``save_to_disk`` writes for them."""
    assert EXPECTED["versions"] == {"datasets": "5.2.0", "pyarrow": "26.0.1"}
    assert set(EXPECTED["folders"]) == set(SCRIPT.FIXTURES)
    for name, entry in EXPECTED["folders"].items():
        spec = SCRIPT.FIXTURES[name]
        docs, masks = SCRIPT.rows(spec["count"], spec["dtype"], spec["seed"])
        assert entry["rows"]["input_ids"] == docs
        assert entry["rows"].get(MASK_COLUMN, masks) == masks
        assert entry["features"]["input_ids"] == {
            "feature": {"dtype": spec["dtype"], "_type": "Value"},
            "_type": "List",
        }
        assert entry["arrow_schema"]["input_ids"] == f"list<item: {spec['dtype']}>"
        same = entry["byte_identical_to_save_to_disk"]
        assert all(s["bytes"] or (s["schema"] and s["batches"]) for s in same.values())


@pytest.mark.parametrize("name", sorted(SCRIPT.FIXTURES))
def test_our_writer_rewrites_the_checked_files(tmp_path: Path, name: str) -> None:
    SCRIPT.write(str(tmp_path))
    folder = tmp_path / name
    written = {p.name: p.read_bytes() for p in sorted(folder.iterdir())}
    assert written == {p.name: p.read_bytes() for p in sorted((OURS / name).iterdir())}
    assert sorted(written) == sorted(EXPECTED["folders"][name]["files"])


@pytest.mark.parametrize("name", sorted(SCRIPT.FIXTURES))
def test_streamload_reads_the_rows_datasets_read(name: str) -> None:
    rows = EXPECTED["folders"][name]["rows"]
    docs, masks = read(OURS / name)
    assert docs == rows["input_ids"]
    if MASK_COLUMN in rows:
        assert masks == rows[MASK_COLUMN]
    info = describe_source(SourceConfig(name="a", path=str(OURS / name))).shards[0]
    assert info.dtype == np.dtype(SCRIPT.FIXTURES[name]["dtype"]).str


def test_the_docstring_example(tmp_path: Path) -> None:
    folder = write(tmp_path / "out", [[5, 6, 0], [7, 0]], "uint16", max_file_bytes=16)
    names = sorted(p.name for p in folder.iterdir())
    assert names == [data_file_name(0, 2), data_file_name(1, 2), "dataset_info.json",
                     "state.json"]  # fmt: skip
    assert json.loads((folder / "state.json").read_text())["_data_files"] == [
        {"filename": "data-00000-of-00002.arrow"},
        {"filename": "data-00001-of-00002.arrow"},
    ]
    assert read(folder)[0] == [[5, 6, 0], [7, 0]]
    assert (MAX_FILE_BYTES, BATCH_ROWS) == (500_000_000, 1000)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lengths=st.lists(st.integers(0, 60), max_size=30),
    dtype=st.sampled_from(INTEGERS),
    masked=st.booleans(),
    limit=st.sampled_from([1, 50, 300, MAX_FILE_BYTES]),
    batch_rows=st.sampled_from([1, 4, BATCH_ROWS]),
    seed=st.integers(0, 1000),
)
def test_round_trip(
    tmp_path_factory: pytest.TempPathFactory,
    lengths: list[int],
    dtype: str,
    masked: bool,
    limit: int,
    batch_rows: int,
    seed: int,
) -> None:
    """Any documents (empty ones too), any dtype, masks or not, any limits: streamload reads
    back the same documents and flags in order; files are listed in ``state.json``, hold
    whole rows within the limit (or one row with tokens; empty rows may pass it), and record
    batches of at most ``batch_rows`` rows."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    docs = [rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True).tolist()
            for n in lengths]  # fmt: skip
    flags = [rng.integers(0, 2, n).tolist() for n in lengths] if masked else None
    folder = tmp_path_factory.mktemp("arrow") / "out"
    write(folder, docs, dtype, flags, max_file_bytes=limit, batch_rows=batch_rows)
    state = json.loads((folder / "state.json").read_text())
    names = [f["filename"] for f in state["_data_files"]]
    assert names == [data_file_name(i, len(names)) for i in range(len(names))]
    assert sorted(p.name for p in folder.iterdir()) == [*names, "dataset_info.json", "state.json"]
    per_row = 8 if masked else 4
    for name in names:
        batches = list(pa.ipc.open_stream(folder / name))
        assert all(b.num_rows <= batch_rows for b in batches)
        rows = [r for b in batches for r in b.column("input_ids").to_pylist()]
        data = sum(len(r) * (np.dtype(dtype).itemsize + masked) + per_row for r in rows)
        assert sum(map(len, rows)) > 0 or len(names) == 1
        assert data <= limit + per_row * sum(not r for r in rows) or sum(map(bool, rows)) == 1
    if sum(lengths):
        got, got_masks = read(folder)
        assert got == docs
        assert got_masks == (flags if masked else [[1] * n for n in lengths])


def test_the_fingerprint_follows_the_data(tmp_path: Path) -> None:
    def fingerprint(name: str, docs: list[list[int]], masks: Any = None) -> str:
        state = (write(tmp_path / name, docs, "int32", masks) / "state.json").read_text()
        return str(json.loads(state)["_fingerprint"])

    one = fingerprint("a", [[1, 2], [3]])
    assert one == fingerprint("b", [[1, 2], [3]])
    assert len(one) == 16 and int(one, 16) >= 0
    others = {fingerprint("c", [[1], [2, 3]]), fingerprint("d", [[1, 2], [3]], [[1, 0], [1]])}
    assert one not in others and len(others) == 2


def test_no_documents_make_one_empty_file(tmp_path: Path) -> None:
    folder = write(tmp_path / "out", [], "int64")
    assert sorted(p.name for p in folder.iterdir()) == [
        "data-00000-of-00001.arrow",
        "dataset_info.json",
        "state.json",
    ]
    with pa.ipc.open_stream(folder / "data-00000-of-00001.arrow") as reader:
        assert reader.read_all().num_rows == 0


def test_a_failure_publishes_nothing_and_an_existing_folder_is_kept(tmp_path: Path) -> None:
    with (
        pytest.raises(ValueError, match="does not fit uint8"),
        ArrowFolderWriter(tmp_path / "out", "uint8", max_file_bytes=1) as writer,
    ):
        writer.add_document(np.array([1, 2]))
        writer.add_document(np.array([300]))
    assert list(tmp_path.iterdir()) == []
    with (
        pytest.raises(ValueError, match="loss_mask shape"),
        ArrowFolderWriter(tmp_path / "out", "uint8", save_loss_masks=True) as writer,
    ):
        writer.add_document(np.array([1, 2]), loss_mask=np.array([1]))
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("x")
    with pytest.raises(ConfigError, match="already exists"):
        ArrowFolderWriter(tmp_path / "taken", "uint16")
    for bad in ({"max_file_bytes": 0}, {"batch_rows": 0}):
        with pytest.raises(ValueError, match="must be >= 1"):
            ArrowFolderWriter(tmp_path / "new", "uint16", **bad)  # type: ignore[arg-type]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
