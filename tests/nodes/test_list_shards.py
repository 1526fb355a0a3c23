"""``ListShards`` describes its source as the loader does: with the config's EOS (issue 36:
a tatm folder's last document kept its trailing EOS 0 only where the EOS reached describe)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
from torchdata.nodes import Loader

from streamload import load_config
from streamload.catalog.sources import describe_sources
from streamload.formats import open_shard
from streamload.nodes import ListShards

TATM_YAML = "name: tokenized\ntokenized_info:\n  dtype: uint16\n  file_extension: bin\n"


def tatm_config(tmp_path: Path) -> Path:
    """A tatm folder (tokens, then zero padding) and a config reading it with EOS 0."""
    folder = tmp_path / "tatm"
    folder.mkdir()
    tokens = np.zeros(12, dtype="<u2")
    tokens[:5] = [5, 6, 0, 7, 0]  # the last document, [7, 0], ends in its EOS
    tokens.tofile(folder / "tokenized_0.bin")
    (folder / "metadata.yaml").write_text(TATM_YAML)
    config = tmp_path / "data.toml"
    config.write_text('seq_len = 2\neos_token_id = 0\n[[sources]]\nname = "t"\npath = "tatm"\n')
    return config


def listed_tokens(node: ListShards) -> list[list[int]]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "excluded")  # the padding, by name: tested elsewhere
        return [open_shard(s).tokens(0, s.num_tokens).tolist() for s in Loader(node)]


def test_the_config_eos_reaches_describe(tmp_path: Path) -> None:
    cfg = load_config(tatm_config(tmp_path))
    node = ListShards(cfg.sources[0], eos_token_id=cfg.eos_token_id, vocab_size=cfg.vocab_size,
                      storage=cfg.storage)  # fmt: skip
    assert listed_tokens(node) == [[5, 6, 0, 7, 0]]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "excluded")
        loader_view = describe_sources(cfg)[0].shards  # what the loader describes
    assert [s.num_tokens for s in loader_view] == [5]
    # without an EOS the trailing zero cannot be told from the padding (documented)
    assert listed_tokens(ListShards(cfg.sources[0])) == [[5, 6, 0, 7]]
