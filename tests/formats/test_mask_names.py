"""Loss-mask file names (streamload.formats.mask_names)."""

from __future__ import annotations

import doctest

import pytest

from streamload.formats import mask_names
from streamload.formats.mask_names import (
    is_mask_name,
    mask_conventions,
    mask_name_for,
    mask_path_for,
)


@pytest.mark.parametrize(
    ("token", "mask"),
    [
        ("/d/token_ids_part_0003.npy", "/d/labels_mask_part_0003.npy"),
        ("token_ids_part_0000.npy", "labels_mask_part_0000.npy"),
        ("s3://bucket/a/00000_shard.ds", "s3://bucket/a/00000_shard.ds.loss"),
        ("/d/part-0-00000.npy", "/d/part-0-00000.npy.loss"),
        ("/d/corpus_text_document.bin", "/d/corpus_text_document.bin.loss"),
        ("/d/shard_00001.npy", "/d/shard_00001.npy.loss"),
        ("token_ids", "token_ids.loss"),  # no <rest>: nothing to pair with
        ("/x", "/x.loss"),
    ],
)
def test_mask_path_for(token: str, mask: str) -> None:
    assert mask_path_for(token) == mask
    assert is_mask_name(mask.rpartition("/")[2])
    assert not is_mask_name(token.rpartition("/")[2])


def test_mask_path_for_refuses_a_folder() -> None:
    with pytest.raises(ValueError, match="file name"):
        mask_path_for("/data/")


def test_mask_conventions_finds_only_the_conventional_sibling() -> None:
    siblings = {"token_ids_part_0.npy", "labels_mask_part_0.npy", "a.ds", "a.ds.loss", "b.ds"}
    assert mask_conventions("token_ids_part_0.npy", siblings) == "labels_mask_part_0.npy"
    assert mask_conventions("/folder/a.ds", siblings) == "a.ds.loss"
    assert mask_conventions("b.ds", siblings) is None
    # one convention per name: a token_ids file's mask is never looked for as F.loss
    assert mask_conventions("token_ids_part_1.npy", {"token_ids_part_1.npy.loss"}) is None


def test_mask_names_never_collide() -> None:
    names = ["part.npy", "part.bin", "part.ds", "token_ids_part.npy", "token_ids_part.bin"]
    masks = [mask_name_for(n) for n in names]
    assert len(set(masks)) == len(masks)


def test_docstring_examples() -> None:
    result = doctest.testmod(mask_names)
    assert (result.failed, result.attempted) == (0, 3)
