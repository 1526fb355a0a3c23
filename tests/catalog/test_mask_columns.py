"""The catalog's choice of an Arrow/Parquet shard's mask column: configured, found by name,
against mask files beside it, and the config checks of ``mask_column`` and ``id_column``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from streamload.catalog.sources import describe_source
from streamload.config import SourceConfig, load_config
from streamload.errors import ConfigError, FormatError
from streamload.formats.mask_names import mask_path_for
from streamload.tools.convert import convert, open_output
from streamload.tools.masks import mask_reader

DOCS = [[5, 6, 0], [7, 0], [8, 9, 10, 0]]
FLAGS = [[0, 1, 1], [1, 1], [0, 0, 1, 1]]


def write(path: Path, **columns: Any) -> Path:
    data = {"input_ids": pa.array(DOCS, pa.list_(pa.int32())), **columns}
    table = pa.table(data)
    with pa.ipc.new_stream(str(path), table.schema) as writer:
        writer.write_table(table, max_chunksize=2)
    return path


def describe(path: Path, **kw: Any) -> Any:
    return describe_source(SourceConfig(name="s", path=str(path), **kw)).shards


def test_loss_mask_is_preferred_to_labels_mask(tmp_path: Path) -> None:
    flags = pa.array(FLAGS, pa.list_(pa.int8()))
    write(tmp_path / "x.arrow", labels_mask=flags, loss_mask=flags)
    (info,) = describe(tmp_path)
    assert info.meta["mask_column"] == "loss_mask" and info.loss_mask == info.path
    (info,) = describe(tmp_path, mask_column="labels_mask")
    assert info.meta["mask_column"] == "labels_mask"


def test_a_mask_file_beside_a_mask_column_must_be_chosen(tmp_path: Path) -> None:
    path = write(tmp_path / "x.arrow", loss_mask=pa.array(FLAGS, pa.list_(pa.int8())))
    Path(mask_path_for(str(path))).write_bytes(bytes(9))
    with pytest.raises(FormatError, match=r"both its column 'loss_mask' and the file .*x\.arrow"
                       r"\.loss look like its loss mask; name one"):  # fmt: skip
        describe(tmp_path)
    (info,) = describe(tmp_path, mask_column="loss_mask")  # the named column wins
    assert mask_reader(info).tokens(0, 9).tolist() == [f for m in FLAGS for f in m]
    (info,) = describe(tmp_path, label_masks=mask_path_for(str(path)))  # the named file wins
    assert info.loss_mask.endswith(".loss") and mask_reader(info).tokens(0, 9).tolist() == [0] * 9


def test_a_named_column_is_required_in_every_file(tmp_path: Path) -> None:
    write(tmp_path / "a.arrow", loss_mask=pa.array(FLAGS, pa.list_(pa.int8())))
    write(tmp_path / "b.arrow")
    assert [i.loss_mask is not None for i in describe(tmp_path)] == [True, False]
    with pytest.raises(FormatError, match=r"b\.arrow: no column 'loss_mask' to read as the loss"
                       r" mask \(mask_column\); the file has columns input_ids"):  # fmt: skip
        describe(tmp_path, mask_column="loss_mask")


def test_convert_carries_the_mask_column(tmp_path: Path) -> None:
    bools = [[bool(f) for f in m] for m in FLAGS]
    write(tmp_path / "x.arrow", loss_mask=pa.array(bools, pa.list_(pa.bool_())))
    catalog = describe_source(SourceConfig(name="s", path=str(tmp_path / "x.arrow")))
    out = tmp_path / "out"
    convert(catalog, open_output(catalog, "numpy", str(out)))
    (info,) = describe(out)
    assert info.format == "numpy" and info.loss_mask is not None
    assert mask_reader(info).tokens(0, 9).tolist() == [f for m in FLAGS for f in m]
    assert np.load(info.path).tolist() == [t for d in DOCS for t in d]


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"format": "numpy", "mask_column": "m"}, r"mask_column = 'm' only applies to format ="),
        ({"format": "mds", "id_column": "i"}, r"id_column = 'i' only applies to format ="),
        ({"mask_column": ""}, r"mask_column = '' must be a column name"),
        ({"id_column": 3}, r"id_column = 3 must be a column name"),
        ({"mask_column": "input_ids"}, r"mask_column = 'input_ids' is the token column"),
        ({"column": "t", "mask_column": "t"}, r"mask_column = 't' is the token column"),
        ({"mask_column": "m", "label_masks": "none"}, r"mask_column = 'm' and label_masks = "),
        ({"mask_column": "m", "label_masks": "x/*.loss"}, r"come from its mask column or"),
    ],
)
def test_config_checks(fields: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        SourceConfig(name="s", path="x", **fields)


def test_config_keys_load_and_print_back() -> None:
    source = {"name": "s", "path": "x", "format": "parquet", "mask_column": "m", "id_column": "k"}
    config = load_config({"seq_len": 4, "sources": [source]})
    assert (config.sources[0].mask_column, config.sources[0].id_column) == ("m", "k")
    assert load_config(config.to_dict()) == config
