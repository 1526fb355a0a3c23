"""Pipeline stages: documented state keys, and recomposed chains that resume exactly."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from torchdata.nodes import BaseNode, Loader, ParallelMapper, Prefetcher

from streamload import LoaderOptions, RankSpec, SampleStream, build_loader, load_config
from streamload.nodes import (
    ListShards,
    MapWorkers,
    PackMasks,
    PlanChunks,
    ReadWindows,
    SplitBatches,
    WindowReader,
)
from streamload.ops.masks import packing_fields, starts_from_offsets
from streamload.state.envelope import STATE_KEYS
from streamload.testing import assert_batches_equal, assert_resumes_exactly
from tests.helpers.corpus import Corpus, write_shards
from tests.helpers.masks import expected_fields

pytestmark = pytest.mark.filterwarnings("ignore:each pass of")

OWN_KEYS = {
    ListShards: {"index"},
    PlanChunks: {"version", "fingerprint", "epoch", "cursor", "sources", "global_batch_size"},
    ReadWindows: set(),
    PackMasks: set(),
    SplitBatches: {"source", "offset"},
    MapWorkers: set(),
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return write_shards(tmp_path_factory.mktemp("docs"), [300, 200, 260])


def documented_keys(cls: type) -> set[str]:
    """Keys named as ````key``:`` in the ``State:`` section of a class docstring."""
    doc = cls.__doc__ or ""
    match = re.search(r"^\s*State:\s*\n((?:[ \t]+\S.*\n?)+)", doc, flags=re.MULTILINE)
    assert match, f"{cls.__name__} has no State: section in its docstring"
    return set(re.findall(r"``(\w+)``\s*:", match.group(1)))


def build_nodes(corpus: Corpus) -> dict[type, BaseNode[Any]]:
    """One instance of each stage, chained as StreamLoader chains them."""
    cfg = load_config(corpus.config(8, packing={"masks": True}))
    stream = SampleStream.from_config(cfg)
    plan = PlanChunks(stream, RankSpec(0, 1, 4), chunk_batches=3)
    read = ReadWindows(plan, stream)
    pack = PackMasks(read, masks=True, eos_token_id=corpus.eos_token_id)
    split = SplitBatches(pack)
    workers = MapWorkers(
        PlanChunks(stream, RankSpec(0, 1, 4), chunk_batches=2),
        WindowReader(stream),
        num_workers=1,
    )
    return {
        MapWorkers: workers,
        ListShards: ListShards(cfg.sources[0]),
        PlanChunks: plan,
        ReadWindows: read,
        PackMasks: pack,
        SplitBatches: split,
    }


@pytest.mark.parametrize("cls", list(OWN_KEYS), ids=lambda c: c.__name__)
def test_state_section_lists_the_state_keys(corpus: Corpus, cls: type) -> None:
    assert documented_keys(cls) == OWN_KEYS[cls]
    node = build_nodes(corpus)[cls]
    node.reset(None)
    next(node)
    next(node)
    state = node.get_state()
    json.dumps(state)  # plain ints and strings all the way down
    source_state = None if OWN_KEYS[cls] else node.source.state_dict()
    if isinstance(node, MapWorkers):
        node._shutdown()
        # Its source runs ahead: the state is the source's after the last delivered item.
        twin = build_nodes(corpus)[MapWorkers].source
        twin.reset(None)
        next(twin)
        next(twin)
        source_state = twin.state_dict()
    if OWN_KEYS[cls]:
        assert set(state) == OWN_KEYS[cls]
    else:
        assert state == source_state, "a pure map passes its source's state on"


def test_class_constants_name_the_keys() -> None:
    assert {ListShards.INDEX_KEY} == OWN_KEYS[ListShards]
    assert set(STATE_KEYS) == OWN_KEYS[PlanChunks]  # the envelope's: one state
    assert {SplitBatches.SOURCE_KEY, SplitBatches.OFFSET_KEY} == OWN_KEYS[SplitBatches]


def test_list_shards_resumes_and_relists_each_pass(corpus: Corpus) -> None:
    source = load_config(corpus.config(8)).sources[0]
    loader = Loader(ListShards(source))
    listed = [Path(shard.path).name for shard in loader]
    assert listed == ["shard_00000.npy", "shard_00001.npy", "shard_00002.npy"]
    assert_resumes_exactly(lambda: Loader(ListShards(source)), passes=2)


def recomposed(corpus: Corpus, masks: bool, chunk: int, threads: int = 0) -> Loader[Any]:
    """``PlanChunks → ReadWindows → PackMasks → SplitBatches`` in a torchdata Loader."""
    cfg = load_config(corpus.config(8, seed=21, packing={"masks": masks}))
    stream = SampleStream.from_config(cfg)
    node: BaseNode[Any] = PlanChunks(stream, RankSpec(1, 2, 3), chunk_batches=chunk)
    if threads:
        node = ParallelMapper(node, WindowReader(stream), num_workers=threads, method="thread")
        node = PackMasks(node, masks, corpus.eos_token_id)
        node = Prefetcher(SplitBatches(node), prefetch_factor=2)
    else:
        node = SplitBatches(PackMasks(ReadWindows(node, stream), masks, corpus.eos_token_id))
    return Loader(node)


@pytest.mark.parametrize(("masks", "chunk"), [(True, 3), (False, 1), (True, 64)])
def test_recomposed_chain_equals_stream_loader(corpus: Corpus, masks: bool, chunk: int) -> None:
    cfg = corpus.config(8, seed=21, packing={"masks": masks})
    loader = build_loader(
        cfg, batch_size=3, rank=1, world_size=2, options=LoaderOptions(chunk_batches=2)
    )
    expected = [batch for _ in range(3) for batch in loader]
    chain = recomposed(corpus, masks, chunk)
    assert_batches_equal(expected, [batch for _ in range(3) for batch in chain])


@pytest.mark.parametrize(("masks", "chunk"), [(True, 3), (False, 1)])
def test_recomposed_chain_resumes_exactly(corpus: Corpus, masks: bool, chunk: int) -> None:
    assert_resumes_exactly(lambda: recomposed(corpus, masks, chunk), passes=2)


def test_chain_with_torchdata_parallel_mapper_resumes_exactly(corpus: Corpus) -> None:
    per_pass = sum(1 for _ in recomposed(corpus, True, 2))
    points = [0, 1, 2, 3, 4, 7, per_pass - 1, per_pass, per_pass + 2, 2 * per_pass]
    assert_resumes_exactly(
        lambda: recomposed(corpus, True, 2, threads=2), passes=2, save_points=points
    )


def test_a_document_start_at_column_zero_changes_nothing() -> None:
    """A producer may mark a window's first token as a document start (a document begins
    exactly at the window): that token opens the window's first segment anyway, so the masks
    must equal the reference, and the previous row's last label must stay unmasked."""
    length, rows = 6, 5
    stream = np.arange(1, rows * length + 2, dtype=np.int64)
    doc_starts = {0, 4, 6, 12, 13, 24, 29}  # 6, 12 and 24 begin windows 1, 2 and 4
    window_starts = np.arange(rows, dtype=np.int64) * length
    starts = starts_from_offsets(window_starts, length + 1, np.array(sorted(doc_starts)))
    starts[:, 0] = np.isin(window_starts, sorted(doc_starts))
    tokens = np.stack([stream[s : s + length + 1] for s in window_starts])
    labels = np.ascontiguousarray(tokens[:, 1:])
    fields = packing_fields(starts, labels)
    for row, start in enumerate(window_starts.tolist()):
        _, want_labels, doc_ids, positions = expected_fields(stream, doc_starts, start, length)
        assert labels[row].tolist() == want_labels.tolist(), f"labels of row {row}"
        assert fields["doc_ids"][row].tolist() == doc_ids.tolist(), f"doc_ids of row {row}"
        assert fields["position_ids"][row].tolist() == positions.tolist(), f"row {row}"
        bounds = [0, *np.flatnonzero(np.diff(doc_ids)) + 1]
        cu = bounds + [length] * (length + 1 - len(bounds))
        assert fields["cu_seqlens"][row].tolist() == cu, f"cu_seqlens of row {row}"
        assert fields["max_seqlen"][row] == max(np.diff([*bounds, length]))
