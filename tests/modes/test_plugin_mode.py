"""A mode is one plug-in (issue 30): a toy mode registered from the test folder gets exact
resumption (0, thread and process workers, another world size), the rank split, the state,
``samples``, ``show`` and ``plan`` from the shared machinery, with no change to the package."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from streamload import ConfigError, LoaderOptions, StateError, build_loader, load_config
from streamload.cli.main import main
from streamload.modes import build_stream, get_mode, mode_names, register_mode, unregister_mode
from streamload.testing import assert_batches_equal, assert_resumes_exactly, collect_global_batches
from tests.helpers.corpus import Corpus, write_shards
from tests.modes.toy_mode import REVERSED, ReversedStream

pytestmark = pytest.mark.filterwarnings("ignore:each pass of")


@pytest.fixture(autouse=True)
def reversed_mode() -> Iterator[None]:
    register_mode(REVERSED)
    yield
    unregister_mode("reversed")


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return write_shards(tmp_path_factory.mktemp("toy-mode"), [300, 170, 410])


def config(docs: Corpus, mode: str = "reversed", **extra: Any) -> dict[str, Any]:
    return docs.config(8, seed=5, sampling={"mode": mode, **extra})


def rows(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """A batch's full windows: the inputs and the last label."""
    return torch.cat([batch["input_ids"], batch["labels"][:, -1:]], dim=1)


def test_the_registry_knows_it_and_builds_its_stream(docs: Corpus) -> None:
    assert "reversed" in mode_names() and get_mode("reversed") is REVERSED
    stream = build_stream(load_config(config(docs)))
    assert isinstance(stream, ReversedStream)
    assert stream.fingerprint()["mode"] == "reversed"


def test_batches_are_concat_windows_reversed(docs: Corpus) -> None:
    plain = list(build_loader(config(docs, "concat"), batch_size=4))
    toy = list(build_loader(config(docs), batch_size=4))
    assert len(toy) == len(plain) > 5
    for want, got in zip(plain, toy, strict=True):
        assert torch.equal(rows(got), rows(want).flip(1))
        assert torch.equal(got["sample_index"], want["sample_index"])


@pytest.mark.parametrize(
    ("workers", "kind"), [(0, "thread"), (2, "thread"), pytest.param(2, "process")]
)
def test_resumes_exactly_with_workers(docs: Corpus, workers: int, kind: str) -> None:
    cfg = config(docs)
    options = LoaderOptions(worker_type=kind, chunk_batches=2)

    def make() -> Any:
        return build_loader(cfg, batch_size=4, num_workers=workers, options=options)

    total = len(make())
    assert_resumes_exactly(make, passes=2, save_points=[0, 1, 5, total, total + 3])


def test_ranks_split_every_global_batch_and_resume_on_another_world_size(docs: Corpus) -> None:
    cfg = config(docs)
    whole = list(build_loader(cfg, batch_size=4))
    ranks = [build_loader(cfg, batch_size=2, rank=r, world_size=2) for r in range(2)]
    assert_batches_equal(whole, collect_global_batches(ranks))
    one = build_loader(cfg, batch_size=4)
    for _ in zip(range(3), one, strict=False):
        pass
    state = one.state_dict()
    resumed = [build_loader(cfg, batch_size=1, rank=r, world_size=4) for r in range(4)]
    for loader in resumed:
        loader.load_state_dict(state)
    assert_batches_equal(whole[3:], collect_global_batches(resumed))


def test_a_state_of_another_mode_is_refused(docs: Corpus) -> None:
    concat = build_loader(config(docs, "concat"), batch_size=4)
    next(iter(concat))
    toy = build_loader(config(docs), batch_size=4)
    with pytest.raises(StateError, match="mode"):
        toy.load_state_dict(concat.state_dict())


def test_samples_show_and_plan_work_for_it(docs: Corpus, tmp_path: Path, capsys) -> None:
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(config(docs)))
    out = tmp_path / "s.npy"
    args = ["samples", str(path), "--start", "4", "--count", "4", "--out", str(out)]
    assert main(args) == 0
    batch = list(build_loader(config(docs), batch_size=4))[1]
    assert np.array_equal(np.load(out), rows(batch).numpy())
    capsys.readouterr()
    assert main(["show", str(path), "--step", "1", "--batch-size", "4", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["mode"] == "reversed"
    assert [s["input_ids"] for s in shown["samples"]] == batch["input_ids"].tolist()
    assert main(["plan", str(path), "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["stream"]["mode"] == "reversed"
    assert (
        planned["stream"]["sources"]["web"]["per_epoch"]
        == build_stream(load_config(config(docs))).num_windows
    )


def test_unknown_and_taken_names_are_refused(docs: Corpus) -> None:
    with pytest.raises(ConfigError, match=r"'upside_down' is not one of 'concat'.*'reversed'"):
        load_config(config(docs, "upside_down"))
    with pytest.raises(ConfigError, match="exists"):
        register_mode(REVERSED)
    unregister_mode("reversed")
    with pytest.raises(ConfigError, match="is not one of"):
        load_config(config(docs))


def test_its_own_sampling_keys_are_its_options(docs: Corpus) -> None:
    plain = list(build_loader(config(docs, "concat"), batch_size=4))
    kept = list(build_loader(config(docs, reverse=False), batch_size=4))
    assert_batches_equal(plain, kept)  # reverse = false: concat's windows as they are
    cfg = load_config(config(docs, reverse=False))
    assert cfg.sampling.reverse is False and cfg.to_dict()["sampling"]["reverse"] is False
    assert load_config(cfg.to_dict()) == cfg
    assert "reverse" not in load_config(config(docs, "concat")).to_dict()["sampling"]
    with pytest.raises(ConfigError, match=r"sampling.reverse = False applies only to mode = 're"):
        load_config(config(docs, "concat", reverse=False))
