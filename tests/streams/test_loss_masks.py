"""Loss masks from data: ``labels`` is -100 exactly where a mask file says the label token is
not trained, in concat, packed, padded and Megatron modes, with workers and in mixtures.

The reference is computed from the mask files, not from the loader: each corpus's mask is a
function of the token at the same position (``trained(token)``), written to the mask files
beside the tokens, so the expected labels are those of the same run with ``label_masks =
"none"``, with -100 wherever ``trained(label)`` is false. A mask read at any other position
than its token's disagrees with that within a few samples.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamload import build_loader
from streamload.errors import ConfigError, FormatError
from streamload.formats.datatrove.datatrove import DatatroveWriter
from streamload.formats.loss_mask import LossMaskWriter
from streamload.formats.mask_names import mask_path_for
from streamload.loader import LoaderOptions
from tests.helpers.corpus import document_tokens
from tests.helpers.shards import write_megatron_documents

EOS = 0


def trained(tokens: np.ndarray) -> np.ndarray:
    """The corpora's loss mask as a function of the token (EOS is trained)."""
    return (tokens % 3 != 1) | (tokens == EOS)


def _documents(total: int, seed: int) -> tuple[np.ndarray, list[int]]:
    tokens = document_tokens(total, eos_token_id=EOS, seed=seed)
    ends = np.flatnonzero(tokens == EOS) + 1
    ends = ends if ends.size and ends[-1] == total else np.append(ends, total)
    return tokens, np.diff(np.concatenate([[0], ends])).tolist()


def write_olmo(folder: Path, sizes: list[int], seed: int = 0) -> None:
    """OLMo-core SFT layout: ``token_ids_part_N.npy`` (headerless uint16) beside
    ``labels_mask_part_N.npy`` (headerless bool)."""
    folder.mkdir(parents=True, exist_ok=True)
    tokens, _ = _documents(sum(sizes), seed)
    begin = 0
    for i, n in enumerate(sizes):
        part = tokens[begin : begin + n]
        part.tofile(folder / f"token_ids_part_{i:04d}.npy")
        trained(part).astype(np.bool_).tofile(folder / f"labels_mask_part_{i:04d}.npy")
        begin += n


def write_datatrove(folder: Path, total: int, seed: int = 1) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tokens, lengths = _documents(total, seed)
    with DatatroveWriter(folder / "d_00000.ds", "t", 2, save_loss_metadata=True) as writer:
        begin = 0
        for n in lengths:
            doc = tokens[begin : begin + n]
            writer.add_document(doc, loss_mask=trained(doc))
            begin += n


def write_megatron(folder: Path, total: int, seed: int = 2) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    tokens, lengths = _documents(total, seed)
    path = write_megatron_documents(folder / "m", tokens, lengths)
    with LossMaskWriter(mask_path_for(str(path))) as writer:
        writer.add(trained(tokens))
    return path


def _olmo_source(folder: Path, **extra: Any) -> dict[str, Any]:
    return {"name": "sft", "path": str(folder), "format": "raw", "dtype": "uint16", **extra}


def batches(cfg: dict[str, Any], count: int = 6, **kw: Any) -> list[dict[str, np.ndarray]]:
    loader = build_loader(cfg, batch_size=kw.pop("batch_size", 4), **kw)
    out = []
    for batch in loader:
        out.append({k: v.numpy().copy() for k, v in batch.items()})
        if len(out) == count:
            break
    loader.close()
    return out


def expected_labels(unmasked: np.ndarray) -> np.ndarray:
    """The labels of the run without masks, -100 where the label token is not trained."""
    out = unmasked.copy()
    real = out != -100
    out[real & ~trained(np.where(real, out, 0))] = -100
    return out


def assert_masked_as_files(
    cfg: dict[str, Any], set_none: Callable[[dict[str, Any]], None], **kw: Any
) -> None:
    got = batches(cfg, **kw)
    bare = {**cfg, "sources": [dict(s) for s in cfg["sources"]]}
    set_none(bare)
    ref = batches(bare, **kw)
    assert len(got) == len(ref) > 0
    masked_somewhere = False
    for mine, theirs in zip(got, ref, strict=True):
        assert np.array_equal(mine["input_ids"], theirs["input_ids"])
        want = expected_labels(theirs["labels"])
        assert np.array_equal(mine["labels"], want)
        masked_somewhere |= bool((want != theirs["labels"]).any())
    assert masked_somewhere  # the case exercised the masks


def _all_none(cfg: dict[str, Any]) -> None:
    for source in cfg["sources"]:
        source["label_masks"] = "none"


@pytest.mark.parametrize(
    ("sampling", "packing"),
    [
        ({"cross_shard": True}, {}),
        ({"cross_shard": False, "shuffle": False}, {"masks": True}),
        ({"mode": "packed"}, {"masks": True}),
        ({"mode": "padded", "long_documents": "truncate"}, {}),
    ],
)
def test_olmo_core_masks_in_every_window_mode(
    tmp_path: Path, sampling: dict[str, Any], packing: dict[str, Any]
) -> None:
    write_olmo(tmp_path / "sft", [700, 333, 901])
    cfg = {
        "seq_len": 16,
        "seed": 3,
        "eos_token_id": EOS,
        "pad_token_id": 1,
        "sources": [_olmo_source(tmp_path / "sft")],
        "sampling": sampling,
        "packing": packing,
    }
    assert_masked_as_files(cfg, _all_none)


def test_datatrove_loss_with_process_workers(tmp_path: Path) -> None:
    write_datatrove(tmp_path / "dt", 2000)
    cfg = {
        "seq_len": 32,
        "seed": 1,
        "eos_token_id": EOS,
        "sources": [{"name": "dt", "path": str(tmp_path / "dt")}],
    }
    options = LoaderOptions(worker_type="process")
    assert_masked_as_files(cfg, _all_none, num_workers=2, options=options)


def test_megatron_mode_masks(tmp_path: Path) -> None:
    path = write_megatron(tmp_path / "meg", 3000)
    cfg = {
        "seq_len": 16,
        "seed": 5,
        "eos_token_id": EOS,
        "sources": [{"name": "m", "path": str(path)}],
        "sampling": {
            "mode": "megatron",
            "num_samples": 64,
            "split": "100,0,0",
            "cache_dir": str(tmp_path / "cache"),
        },
        "packing": {"masks": True},
    }
    assert_masked_as_files(cfg, _all_none)


def test_mixture_masks_only_the_source_with_masks(tmp_path: Path) -> None:
    write_olmo(tmp_path / "sft", [1200])
    plain = tmp_path / "plain"
    plain.mkdir()
    document_tokens(1500, eos_token_id=EOS, seed=9).tofile(plain / "p.bin")
    cfg = {
        "seq_len": 16,
        "seed": 2,
        "eos_token_id": EOS,
        "global_batch_size": 8,
        "sources": [
            _olmo_source(tmp_path / "sft", weight=0.5),
            {
                "name": "plain",
                "path": str(plain),
                "format": "raw",
                "dtype": "uint16",
                "weight": 0.5,
            },
        ],
        "sampling": {"num_samples": 64},
    }
    got = batches(cfg, batch_size=8)
    bare = {**cfg, "sources": [{**cfg["sources"][0], "label_masks": "none"}, cfg["sources"][1]]}
    ref = batches(bare, batch_size=8)
    for mine, theirs in zip(got, ref, strict=True):
        sft = mine["source_ids"] == 0
        assert np.array_equal(mine["labels"][~sft], theirs["labels"][~sft])
        assert np.array_equal(mine["labels"][sft], expected_labels(theirs["labels"][sft]))


def test_named_masks_pair_in_listing_order(tmp_path: Path) -> None:
    write_olmo(tmp_path / "sft", [400, 500])
    masks = tmp_path / "masks"
    masks.mkdir()
    for i in range(2):  # moved elsewhere, renamed: found only because the config names them
        (tmp_path / "sft" / f"labels_mask_part_{i:04d}.npy").rename(masks / f"m{i}.bin")
    cfg = {
        "seq_len": 16,
        "seed": 0,
        "eos_token_id": EOS,
        "sources": [_olmo_source(tmp_path / "sft", label_masks=str(masks / "m*.bin"))],
    }
    assert_masked_as_files(cfg, _all_none)


def test_a_folder_of_masks_is_not_listed_as_token_files(tmp_path: Path) -> None:
    write_olmo(tmp_path / "sft", [400, 500])
    from streamload.catalog.sources import describe_source
    from streamload.config import SourceConfig

    catalog = describe_source(SourceConfig(**_olmo_source(tmp_path / "sft")))
    names = [Path(s.path).name for s in catalog.shards]
    assert names == ["token_ids_part_0000.npy", "token_ids_part_0001.npy"]
    masks = [Path(s.loss_mask or "").name for s in catalog.shards]
    assert masks == ["labels_mask_part_0000.npy", "labels_mask_part_0001.npy"]


def test_wrong_mask_size_names_both_files(tmp_path: Path) -> None:
    write_olmo(tmp_path / "sft", [400])
    mask = tmp_path / "sft" / "labels_mask_part_0000.npy"
    mask.write_bytes(mask.read_bytes()[:-3])
    cfg = {"seq_len": 16, "sources": [_olmo_source(tmp_path / "sft")]}
    with pytest.raises(
        FormatError,
        match=r"labels_mask_part_0000\.npy: 397 bytes, but it is the "
        r"loss mask of .*token_ids_part_0000\.npy, which holds 400 tokens",
    ):
        build_loader(cfg, batch_size=2)


def test_named_masks_must_pair_one_to_one(tmp_path: Path) -> None:
    write_olmo(tmp_path / "sft", [400, 500])
    one = str(tmp_path / "sft" / "labels_mask_part_0000.npy")
    cfg = {"seq_len": 16, "sources": [_olmo_source(tmp_path / "sft", label_masks=[one])]}
    with pytest.raises(ConfigError, match="lists 1 files but the source lists 2 token files"):
        build_loader(cfg, batch_size=2)


@pytest.mark.parametrize("value", [[], 3, ["auto", "x"], ""])
def test_bad_label_masks_values(tmp_path: Path, value: Any) -> None:
    cfg = {"seq_len": 16, "sources": [{"name": "s", "path": str(tmp_path), "label_masks": value}]}
    with pytest.raises(ConfigError, match="label_masks"):
        build_loader(cfg, batch_size=2)


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    sizes=st.lists(st.integers(40, 400), min_size=1, max_size=4),
    seq_len=st.sampled_from([7, 16, 33]),
    mode=st.sampled_from(["concat", "packed", "padded"]),
    cross_shard=st.booleans(),
)
def test_masks_follow_the_files_for_any_corpus(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: list[int],
    seq_len: int,
    mode: str,
    cross_shard: bool,
) -> None:
    folder = tmp_path_factory.mktemp("any")
    write_olmo(folder, sizes, seed=len(sizes) * seq_len)
    sampling: dict[str, Any] = {"mode": mode, "cross_shard": cross_shard}
    if mode != "concat":
        sampling = {"mode": mode, "long_documents": "split"}
    cfg = {
        "seq_len": seq_len,
        "seed": 4,
        "eos_token_id": EOS,
        "pad_token_id": 1,
        "sources": [_olmo_source(folder)],
        "sampling": sampling,
    }
    if (sum(sizes) if cross_shard else max(sizes)) <= seq_len + 1 and mode == "concat":
        return
    got = batches(cfg, count=3, batch_size=2)
    ref = batches(
        {**cfg, "sources": [_olmo_source(folder, label_masks="none")]}, count=3, batch_size=2
    )
    for mine, theirs in zip(got, ref, strict=True):
        assert np.array_equal(mine["labels"], expected_labels(theirs["labels"]))
