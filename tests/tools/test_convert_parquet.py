"""``streamload convert --to parquet``: every format to Parquet and back, Hub-ready output."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload.catalog.sources import SourceCatalog, describe_source
from streamload.cli.main import main
from streamload.config import SourceConfig
from streamload.formats.arrow.parquet import ROW_GROUP_TOKENS
from streamload.formats.registry import open_shard
from streamload.tools.convert import TARGETS, convert, open_output, open_writer, output_paths
from streamload.tools.documents import document_bounds, iter_documents
from tests.helpers.corpus_factory import write_corpus

DESTINATIONS = {
    "megatron": "src",
    "modalities": "src.pbin",
    "dolma": "src.npy",
    "datatrove": "src.ds",
    "numpy": "src",
    "parquet": "src.parquet",
    "arrow": "src",
    "mds": "src",
    "litdata": "src",
}
"""A destination of each format streamload writes."""


def catalog_of(path: Path, dtype: str = "auto") -> SourceCatalog:
    return describe_source(SourceConfig(name="t", path=str(path), dtype=dtype))


def documents_of(catalog: SourceCatalog, eos: int | None = 0) -> list[list[int]]:
    """Every document (split at EOS where a format has no index), in storage order."""
    docs = []
    for info in catalog.shards:
        shard = open_shard(info)
        docs += [d.tolist() for d in iter_documents(shard, document_bounds(shard, eos))]
    return docs


def write_format(folder: Path, fmt: str, docs: list[list[int]], dtype: str) -> Path:
    """``docs`` written by streamload's writer of ``fmt`` into ``folder``."""
    dst = folder / DESTINATIONS[fmt]
    with open_writer(fmt, str(dst), np.dtype(dtype)) as writer:
        for doc in docs:
            writer.add_document(np.asarray(doc, dtype=dtype))
    return dst


def to_format(catalog: SourceCatalog, fmt: str, dst: Path) -> Path:
    convert(catalog, open_output(catalog, fmt, str(dst)), eos_token_id=0)
    return dst


@settings(max_examples=6, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 40), min_size=1, max_size=30),
    wide=st.booleans(),
    seed=st.integers(0, 100),
)
@pytest.mark.parametrize("fmt", [f for f in TARGETS if f != "parquet"])
def test_every_format_to_parquet_and_back_is_identical(
    tmp_path_factory: pytest.TempPathFactory, fmt: str, lengths: list[int], wide: bool, seed: int
) -> None:
    """Documents end in EOS 0 (so a NumPy folder finds them again); the token file written
    back equals the original byte for byte, and so do the documents. Widths: uint16, and a
    4-byte dtype the format stores (datatrove and Modalities store unsigned tokens)."""
    dtype = "uint16" if not wide else "uint32" if fmt in ("datatrove", "modalities") else "int32"
    headerless = dtype if fmt == "dolma" else "auto"  # a dolma .npy does not record it
    rng = np.random.default_rng(seed)
    docs = [[*rng.integers(1, 60000, n - 1).tolist(), 0] for n in lengths]
    root = tmp_path_factory.mktemp(fmt)
    (root / "a").mkdir()
    (root / "b").mkdir()
    source = catalog_of(write_format(root / "a", fmt, docs, dtype), headerless)
    parquet = catalog_of(to_format(source, "parquet", root / "p.parquet"))
    assert parquet.shards[0].dtype == np.dtype(dtype).str  # the source's dtype kept
    assert documents_of(parquet, None) == docs
    back = catalog_of(to_format(parquet, fmt, root / "b" / DESTINATIONS[fmt]), headerless)
    assert documents_of(back) == docs
    for a, b in zip(source.shards, back.shards, strict=True):
        assert Path(a.path).read_bytes() == Path(b.path).read_bytes()


def test_parquet_output_is_hub_ready(tmp_path: Path) -> None:
    """Row groups of about ROW_GROUP_TOKENS tokens, the source's dtype, an input_ids column,
    statistics; pyarrow reads the same documents."""
    corpus = write_corpus(tmp_path / "src", [ROW_GROUP_TOKENS * 5 // 2], mean_doc_len=300)
    source = catalog_of(corpus.folder)
    out = to_format(source, "parquet", tmp_path / "out.parquet")
    metadata = pq.ParquetFile(out).metadata
    table = pq.read_table(out)
    assert table.schema == pa.schema([pa.field("input_ids", pa.list_(pa.uint16()))])
    assert metadata.num_row_groups == 3
    column = table.column("input_ids")
    assert np.array_equal(pa.concat_arrays([c.values for c in column.chunks]), corpus.stream)
    sizes = [metadata.row_group(g).column(0).statistics.num_values for g in range(3)]
    assert all(ROW_GROUP_TOKENS <= n < ROW_GROUP_TOKENS + 10_000 for n in sizes[:2])
    assert sum(sizes) == corpus.stream.size
    assert documents_of(catalog_of(out)) == documents_of(source)


def test_cli_says_what_it_wrote_and_refuses_bad_destinations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write_format(tmp_path, "megatron", [[5, 6, 0], [7, 0]], "uint16")
    assert main(["convert", str(src), str(tmp_path / "out") + "/", "--to", "parquet"]) == 0
    out = tmp_path / "out" / "train-00000-of-00001.parquet"
    assert f"wrote 2 documents, 5 tokens as parquet (uint16): {out}" in capsys.readouterr().out
    assert pq.read_table(out).column("input_ids").to_pylist() == [[5, 6, 0], [7, 0]]
    assert main(["convert", str(src), str(out), "--to", "parquet", "--dtype", "int32"]) != 0
    assert "exists" in capsys.readouterr().err
    assert main(["convert", str(src), str(tmp_path / "x.pq"), "--to", "parquet"]) != 0
    assert "must end in .parquet" in capsys.readouterr().err
    wide = tmp_path / "wide.parquet"
    assert main(["convert", str(src), str(wide), "--to", "parquet", "--dtype", "int32"]) == 0
    assert pq.read_table(wide).schema.field("input_ids").type == pa.list_(pa.int32())
    # a loss mask is a labels_mask column of the file (issue 36), no file beside it
    assert output_paths("parquet", "x.parquet", masks=True) == ["x.parquet"]


@pytest.mark.filterwarnings("ignore:each pass of")
def test_masks_round_trip_as_a_labels_mask_column(tmp_path: Path) -> None:
    """Issue 36: ``--to parquet`` writes the loss mask as a ``labels_mask`` column (as
    ``--to arrow`` does), no ``.loss`` file; the loader reads the file back into the source's
    very batches and labels, and a folder of Hub-sized files carries the column too."""
    from streamload import build_loader
    from streamload.formats.datatrove.datatrove import DatatroveWriter
    from streamload.testing import assert_batches_equal

    rng = np.random.default_rng(7)
    docs = [np.append(rng.integers(2, 300, int(n)), 0) for n in rng.integers(1, 30, 40)]
    flags = [rng.integers(0, 2, d.size).astype(bool) for d in docs]
    src = tmp_path / "src.ds"
    with DatatroveWriter(src, None, 2, save_loss_metadata=True) as writer:
        for doc, flag in zip(docs, flags, strict=True):
            writer.add_document(doc.astype(np.uint16), loss_mask=flag)
    out, folder = tmp_path / "out.parquet", tmp_path / "hub"
    assert main(["convert", str(src), str(out), "--to", "parquet"]) == 0
    assert (
        main(["convert", str(src), str(folder), "--to", "parquet", "--max-file-size", "300"]) == 0
    )
    assert [p.name for p in tmp_path.rglob("*.loss")] == ["src.ds.loss"]  # the source's
    want = [f.astype(int).tolist() for f in flags]
    for path in (out, folder):
        table = pq.read_table(path)  # what pyarrow (and datasets) see: a column
        assert table.schema.field("labels_mask").type == pa.list_(pa.uint8())
        assert table.column("labels_mask").to_pylist() == want
        assert table.column("input_ids").to_pylist() == [d.tolist() for d in docs]
    assert len(list(folder.iterdir())) > 1

    def config(path: Path) -> dict[str, object]:
        return {"seq_len": 16, "seed": 4, "eos_token_id": 0, "vocab_size": 300,
                "sources": [{"name": "s", "path": str(path)}]}  # fmt: skip

    with build_loader(config(src), batch_size=3) as loader:
        expected = list(loader)
    assert any(bool((b["labels"] == -100).any()) for b in expected)  # the masks are applied
    with build_loader(config(out), batch_size=3) as loader:
        assert_batches_equal(expected, list(loader), "parquet with a labels_mask column")
