"""torchtitan's command line overrides the adapter's config (issue 36 item 16).

torchtitan 0.3 parses ``--dataloader.*`` with tyro (``ConfigManager.parse_args``), which
expands a dataclass field only when its value is an instance of the declared type
(``BaseDataLoader.Config``) and only fields of types it parses (``str | os.PathLike |
Mapping | DataConfig`` is not one). The real parser runs where torchtitan's trainer imports;
the field-type rule is checked everywhere.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import json
import typing
import warnings
from pathlib import Path
from typing import Any

import pytest

from streamload import build_loader
from streamload.config.loader_args import LoaderOptions, WorkerType
from streamload.integrations.torchtitan import TorchtitanDataConfig
from tests.helpers.corpus import write_shards

SEQ_LEN = 8

_PARSED = (str, int, bool, float)
"""Field types tyro parses from one command-line value (and enums, by member name)."""


def registry_config() -> Any:
    """A torchtitan config registry function (``--module`` this test module): torchtitan's
    trainer config with streamload as its data loader."""
    from torchtitan.trainer import Trainer

    return Trainer.Config(dataloader=TorchtitanDataConfig(data="data.toml", num_workers=1))


def parse(*overrides: str) -> Any:
    """torchtitan 0.3's own command-line parsing of :func:`registry_config`."""
    from torchtitan.config.manager import ConfigManager

    module = ["--module", __name__, "--config", registry_config.__name__]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ConfigManager().parse_args([*module, *overrides])


@pytest.fixture()
def config(tmp_path: Path) -> Path:
    corpus = write_shards(tmp_path / "data", [300, 200])
    path = tmp_path / "data.json"
    path.write_text(json.dumps(corpus.config(SEQ_LEN, seed=5)))
    return path


def _parsed_type(kind: Any) -> bool:
    options = [k for k in typing.get_args(kind) if k is not type(None)] or [kind]
    return all(k in _PARSED or (isinstance(k, type) and issubclass(k, enum.Enum)) for k in options)


def test_every_field_has_a_type_torchtitans_parser_takes() -> None:
    """The rule tyro applies: primitives, enums, optional ones, nested dataclasses of them
    with a default (``options``); never a path-or-mapping union."""
    hints = typing.get_type_hints(TorchtitanDataConfig)
    for name in ("data", "num_workers", "infinite"):
        assert _parsed_type(hints[name]), (name, hints[name])
    assert hints["options"] is LoaderOptions
    option_hints = typing.get_type_hints(LoaderOptions)
    for f in dataclasses.fields(LoaderOptions):
        assert _parsed_type(option_hints[f.name]), (f.name, option_hints[f.name])
    assert TorchtitanDataConfig(data="x.toml").options == LoaderOptions()


def test_a_path_given_in_code_is_kept_as_a_string(config: Path) -> None:
    assert TorchtitanDataConfig(data=config).data == str(config)


def test_torchtitans_command_line_overrides_each_field(config: Path) -> None:
    pytest.importorskip("tyro")
    pytest.importorskip("torchtitan.trainer")  # 0.3 (0.2 needs triton; 0.1 has no CLI)
    from torchtitan.components.dataloader import BaseDataLoader

    assert isinstance(parse().dataloader, BaseDataLoader.Config)
    got = parse(
        "--dataloader.data", str(config), "--dataloader.num_workers", "2",
        "--dataloader.no-infinite", "--dataloader.options.worker-type", "PROCESS",
        "--dataloader.options.prefetch", "3",
    ).dataloader  # fmt: skip
    assert (got.data, got.num_workers, got.infinite) == (str(config), 2, False)
    assert got.options == LoaderOptions(worker_type=WorkerType.PROCESS, prefetch=3)


def test_the_overridden_config_builds_the_loader_it_names(config: Path) -> None:
    pytest.importorskip("tyro")
    pytest.importorskip("torchtitan.trainer")
    parsed = parse("--dataloader.data", str(config), "--dataloader.num-workers", "0")
    loader = parsed.dataloader.build(
        dp_world_size=1, dp_rank=0, tokenizer=None, seq_len=SEQ_LEN, local_batch_size=4
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = [b["input_ids"] for b in itertools.islice(build_loader(config, batch_size=4), 3)]
    got = [inputs["input"] for inputs, _ in itertools.islice(loader, 3)]
    assert [g.tolist() for g in got] == [w.tolist() for w in want]
    loader.close()
