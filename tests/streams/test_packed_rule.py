"""The packing rule of packed mode (issue 34): one best fit over the whole epoch by default,
``[sampling] group_size`` for the grouped rule of before (4096: its plans, plan keys and
states bit for bit), and states saved under the old default adopted by a loader that leaves
``group_size`` unset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from torchdata.stateful_dataloader import StatefulDataLoader

import streamload
from streamload.dataset import StreamDataset
from streamload.errors import ConfigError, StateError
from streamload.modes.packed.plan_cache import plan_description
from streamload.plan.packing import pack_items
from streamload.plan.partition import RankSpec
from streamload.streams.interface import SampleStream
from streamload.testing import assert_batches_equal, assert_resumes_exactly
from tests.helpers.corpus_factory import Corpus
from tests.streams.test_packed import packed_config

pytestmark = pytest.mark.filterwarnings("ignore:each pass of")  # a partial last batch

OLD_RULE = {"algorithm": "bfd-groups-fifo-v1", "group_size": 4096}
"""The packing fields of every plan key and state made before issue 34."""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """~6,000 documents: more items than one group of 4,096, so the two rules differ."""
    from tests.helpers.corpus_factory import write_corpus

    return write_corpus(tmp_path_factory.mktemp("corpus"), [16_000, 14_000], mean_doc_len=5.0)


def stream_of(corpus: Corpus, mode: str = "packed", **sampling: Any) -> SampleStream:
    return SampleStream.from_config(streamload.load_config(packed_config(corpus, mode, **sampling)))


def test_default_is_the_whole_epoch_rule_and_4096_the_old_one(corpus: Corpus) -> None:
    default, old = stream_of(corpus), stream_of(corpus, group_size=4096)
    items = default.sources[0].plan.num_items
    assert items > 4096
    assert default.fingerprint()["packing"]["algorithm"] == "bfd-epoch-refill-v1"
    assert "group_size" not in default.fingerprint()["packing"]
    assert {k: old.fingerprint()["packing"][k] for k in OLD_RULE} == OLD_RULE
    catalog = old.sources[0].catalog
    key = plan_description(streamload.load_config(packed_config(corpus, group_size=4096)), catalog)
    assert {k: key[k] for k in OLD_RULE} == OLD_RULE  # old plan caches are found again
    assert "group_size" not in plan_description(default.config, catalog)
    assert default.sources[0].plan.num_samples <= old.sources[0].plan.num_samples
    assert not np.array_equal(default.sources[0].plan.starts, old.sources[0].plan.starts)


def test_group_size_4096_gives_the_plan_of_groups_of_4096(corpus: Corpus) -> None:
    plan = stream_of(corpus, group_size=4096).sources[0].plan
    lengths = np.asarray(plan.lengths, dtype=np.int64)
    # Rebuild from the items in storage order: the grouped rule over them gives this plan.
    order = np.argsort(plan.starts, kind="stable")
    expected = pack_items(lengths[order], 17, 4096)
    np.testing.assert_array_equal(expected.offsets, plan.offsets)
    np.testing.assert_array_equal(order[expected.items], np.arange(order.size))


def test_padded_mode_keeps_the_fields_it_always_had(corpus: Corpus) -> None:
    padded = stream_of(corpus, "padded")
    assert {k: padded.fingerprint()["packing"][k] for k in OLD_RULE} == OLD_RULE
    key = plan_description(padded.config, padded.sources[0].catalog)
    assert {k: key[k] for k in OLD_RULE} == OLD_RULE


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "4096"])
def test_bad_group_sizes_are_refused(corpus: Corpus, value: Any) -> None:
    with pytest.raises(ConfigError, match=r"sampling\.group_size"):
        streamload.load_config(packed_config(corpus, group_size=value))
    with pytest.raises(ConfigError, match="group_size = 8 has no meaning with mode = 'padded'"):
        streamload.load_config(packed_config(corpus, "padded", group_size=8))


@pytest.mark.parametrize("group_size", [None, 4096, 1000])
def test_runs_resume_exactly_under_each_rule(corpus: Corpus, group_size: int | None) -> None:
    cfg = packed_config(corpus, **({} if group_size is None else {"group_size": group_size}))
    assert_resumes_exactly(
        lambda: streamload.build_loader(cfg, batch_size=64), passes=2, save_points=[0, 5, 40]
    )


def test_an_old_default_state_resumes_in_a_loader_without_group_size(corpus: Corpus) -> None:
    """A state saved under the old default (groups of 4,096, as ``group_size = 4096``
    writes it) continues exactly in a default loader, which adopts the state's rule."""
    old = packed_config(corpus, group_size=4096)
    assert_resumes_exactly(
        lambda: streamload.build_loader(old, batch_size=64),
        make_resumed=lambda: streamload.build_loader(packed_config(corpus), batch_size=64),
        passes=2,
        save_points=[0, 7, 40],
    )


def test_an_old_default_state_resumes_in_a_stream_dataset(corpus: Corpus) -> None:
    def make(**sampling: Any) -> StatefulDataLoader:
        ds = StreamDataset(stream_of(corpus, **sampling), RankSpec(0, 1, 64))
        return StatefulDataLoader(ds, batch_size=None, num_workers=0)

    whole = list(make(group_size=4096))
    run = make(group_size=4096)
    it = iter(run)
    for _ in range(5):
        next(it)
    state = run.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    assert_batches_equal(whole[5:], list(resumed), "StreamDataset after 5")


def test_a_set_group_size_never_adopts_another(corpus: Corpus) -> None:
    old = streamload.build_loader(packed_config(corpus, group_size=4096), batch_size=64)
    next(iter(old))
    state = old.state_dict()
    other = streamload.build_loader(packed_config(corpus, group_size=1000), batch_size=64)
    with pytest.raises(StateError, match=r"packing\.group_size: saved 4096, now 1000"):
        other.load_state_dict(state)
    whole = streamload.build_loader(packed_config(corpus), batch_size=64)
    next(iter(whole))
    with pytest.raises(StateError, match=r"leave \[sampling\] group_size unset"):
        streamload.build_loader(
            packed_config(corpus, group_size=4096), batch_size=64
        ).load_state_dict(whole.state_dict())


def test_the_node_chain_names_the_key_to_set(corpus: Corpus) -> None:
    """Entry points that cannot swap their stream (the node chain) refuse an old state,
    naming the setting that resumes it."""
    from streamload.state import load_position

    old = streamload.build_loader(packed_config(corpus, group_size=4096), batch_size=64)
    next(iter(old))
    with pytest.raises(StateError, match=r"group_size = 4096"):
        load_position(old.state_dict(), stream_of(corpus), global_batch=64)


def test_plan_shows_the_group_size(
    corpus: Corpus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from streamload.cli.main import main

    (tmp_path / "c.json").write_text(json.dumps(packed_config(corpus, group_size=4096)))
    assert main(["plan", str(tmp_path / "c.json"), "--steps", "2"]) == 0
    assert "best fit within groups of 4,096 items" in capsys.readouterr().out
    assert main(["plan", str(tmp_path / "c.json"), "--steps", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["group_size"] == 4096


def test_padded_runs_resume_exactly_with_their_old_fields(corpus: Corpus) -> None:
    cfg = packed_config(corpus, "padded")
    loader = streamload.build_loader(cfg, batch_size=64)
    assert {k: loader.state_dict()["fingerprint"]["packing"][k] for k in OLD_RULE} == OLD_RULE
    assert_resumes_exactly(
        lambda: streamload.build_loader(cfg, batch_size=64), save_points=[0, 9, 60]
    )
