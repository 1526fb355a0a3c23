"""vsl mode end to end: every step holds ``tokens_per_batch`` tokens of pieces of one length,
split evenly over the ranks; every piece's tokens are the data at its document offset; each
kept pair trained once per epoch; exact, elastic resumption through every entry point.

The expected pieces are computed here from the corpus's EOS-delimited documents, shard by
shard, by the rule of plan/vsl.py's docstring, independently of the library.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streamload
from streamload.errors import ConfigError, StateError
from streamload.testing import assert_resumes_exactly
from tests.helpers.corpus_factory import Corpus, write_corpus

TOKENS = 256


def vsl_config(corpus: Corpus, **sampling: Any) -> dict[str, Any]:
    return corpus.config(
        seq_len=64,
        sampling={"mode": "vsl", "min_seq_len": 8, "tokens_per_batch": TOKENS, **sampling},
    )


def documents(corpus: Corpus) -> list[tuple[int, np.ndarray]]:
    """(stream offset, tokens) of each EOS-delimited document, shard by shard."""
    out, at = [], 0
    for shard in corpus.tokens:
        ends = np.flatnonzero(shard == corpus.eos_token_id) + 1
        bounds = np.unique(np.concatenate([[0], ends, [shard.size]]))
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            out.append((at + a, shard[a:b]))
        at += shard.size
    return out


def expected_pairs(corpus: Corpus, low: int, top: int) -> Counter[tuple[int, int]]:
    """Every kept (input, label) stream position pair, by a per-document loop."""
    pairs: Counter[tuple[int, int]] = Counter()
    for start, doc in documents(corpus):
        n = max(doc.size - 1, 0)
        kept = n - (n % top) % low
        pairs.update((start + i, start + i + 1) for i in range(kept))
    return pairs


def epoch(cfg: dict[str, Any], world: int = 1, rank: int = 0, **kw: Any) -> list[dict]:
    return list(streamload.build_loader(cfg, world_size=world, rank=rank, **kw))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return write_corpus(
        tmp_path_factory.mktemp("vsl"), [6000, 3000, 4500], mean_doc_len=60.0, seed=3
    )


def test_every_step_has_its_tokens_of_one_length(corpus: Corpus) -> None:
    batches = epoch(vsl_config(corpus))
    assert batches
    for batch in batches:
        rows, length = batch["input_ids"].shape
        assert rows * length == TOKENS and length in (8, 16, 32, 64)
        assert torch.equal(batch["position_ids"], torch.arange(length).expand(rows, length))
        assert (batch["source_ids"] == 0).all()
    # inputs and labels are one row of L + 1 tokens, shifted; no label is masked
    for batch in batches[:40]:
        for inputs, labels in zip(batch["input_ids"], batch["labels"], strict=True):
            assert torch.equal(inputs[1:], labels[:-1])
            assert (labels != -100).all()


def test_each_kept_pair_is_trained_once_per_epoch(corpus: Corpus) -> None:
    cfg = vsl_config(corpus, shuffle=False)
    loader = streamload.build_loader(cfg)
    stream, source = loader.stream, loader.stream.sources[0]
    seen: Counter[tuple[int, int]] = Counter()
    for step in range(len(loader)):
        for piece in stream.step_rows(0, step)[1].tolist():
            start = int(source.pieces.starts[piece])
            length = source.pieces.lengths[int(source.bucket_of(np.array([piece]))[0])]
            seen.update((start + i, start + i + 1) for i in range(length))
    expected = expected_pairs(corpus, 8, 64)
    assert max(seen.values()) == 1 and set(seen) <= set(expected)
    report = source.report(stream.batches)
    leftover = sum(r["leftover_pieces"] * r["length"] for r in report["lengths"])
    assert len(expected) - len(seen) == leftover  # all kept pairs but the leftover pieces'
    assert report["dropped_tokens"] == sum(
        max(d.size - 1, 0) % 64 % 8 for _, d in documents(corpus)
    )
    # the delivered inputs are those pairs' tokens
    tokens = corpus.stream
    batches = list(loader)
    for step in (0, 1, len(batches) - 1):
        _, pieces = stream.step_rows(0, step)
        got = batches[step]["input_ids"]
        for row, piece in enumerate(pieces.tolist()):
            start = int(source.pieces.starts[piece])
            want = tokens[start : start + got.shape[1] + 1].astype(np.int64)
            assert got[row].tolist() == want[:-1].tolist()
            assert batches[step]["labels"][row].tolist() == want[1:].tolist()


@pytest.mark.parametrize("world", [2, 4])
def test_ranks_split_every_step_evenly(corpus: Corpus, world: int) -> None:
    cfg = vsl_config(corpus, curriculum="cyclic_p2")
    whole = epoch(cfg)
    parts = [epoch(cfg, world, r) for r in range(world)]
    assert all(len(p) == len(whole) for p in parts)
    for step, batch in enumerate(whole):
        shares = [p[step] for p in parts]
        assert len({s["input_ids"].numel() for s in shares}) == 1
        joined = torch.cat([s["input_ids"] for s in shares])
        assert torch.equal(joined, batch["input_ids"])
        assert torch.equal(torch.cat([s["sample_index"] for s in shares]), batch["sample_index"])


def test_pieces_are_used_once_per_epoch_and_reshuffled(corpus: Corpus) -> None:
    loader = streamload.build_loader(vsl_config(corpus))
    first = torch.cat([b["sample_index"] for b in loader]).tolist()
    second = torch.cat([b["sample_index"] for b in loader]).tolist()  # the next epoch
    assert len(set(first)) == len(first) and sorted(first) != first
    assert sorted(first) != sorted(second) or first != second
    assert loader.state_dict()["epoch"] == 1


@pytest.mark.parametrize("curriculum", ["natural", "grow_p2"])
def test_resumes_exactly_on_other_world_sizes_and_workers(corpus: Corpus, curriculum: str) -> None:
    cfg = vsl_config(corpus, curriculum=curriculum)

    def make(world: int = 1, workers: int = 0, kind: str = "thread") -> Any:
        def build() -> Any:
            options = streamload.LoaderOptions(worker_type=kind)
            return streamload.build_loader(
                cfg, world_size=world, rank=0, num_workers=workers, options=options
            )

        return build

    points = [0, 1, 7, 30]
    assert_resumes_exactly(make(2), save_points=points, make_resumed=make(2, 2), passes=2)
    # a state saved at world 2 resumes at world 1 and 4 on the same global sample
    saved = streamload.build_loader(cfg, world_size=2, rank=0)
    it = iter(saved)
    for _ in range(5):
        next(it)
    state = saved.state_dict()
    reference = epoch(cfg)[5:]
    resumed = streamload.build_loader(cfg)
    resumed.load_state_dict(state)
    assert [b["input_ids"].tolist() for b in resumed] == [
        b["input_ids"].tolist() for b in reference
    ]
    shares = []
    for r in range(4):
        quarter = streamload.build_loader(cfg, world_size=4, rank=r)
        quarter.load_state_dict(state)
        shares.append(list(quarter))
    for step, batch in enumerate(reference):
        joined = torch.cat([s[step]["input_ids"] for s in shares])
        assert torch.equal(joined, batch["input_ids"])


def test_process_workers_equal_the_zero_worker_run(corpus: Corpus) -> None:
    cfg = vsl_config(corpus, curriculum="grow_linear", num_cycles=2)
    want = epoch(cfg)
    options = streamload.LoaderOptions(worker_type="process")
    got = epoch(cfg, num_workers=2, options=options)
    assert len(got) == len(want)
    for a, b in zip(want, got, strict=True):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_stream_dataset_under_stateful_dataloader(corpus: Corpus) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    cfg = vsl_config(corpus)
    spec = streamload.RankSpec(0, 2, 2)

    def make() -> Any:
        stream = streamload.SampleStream.from_config(streamload.load_config(cfg))
        return StatefulDataLoader(
            streamload.StreamDataset(stream, spec), batch_size=None, num_workers=2
        )

    assert_resumes_exactly(make, save_points=[0, 3, 10], echo=False)


def test_a_state_of_another_curriculum_is_refused(corpus: Corpus) -> None:
    loader = streamload.build_loader(vsl_config(corpus))
    next(iter(loader))
    other = streamload.build_loader(vsl_config(corpus, curriculum="grow_p2"))
    with pytest.raises(StateError, match="curriculum"):
        other.load_state_dict(loader.state_dict())


def test_config_and_loader_mistakes_are_named(corpus: Corpus) -> None:
    cfg = vsl_config(corpus)
    with pytest.raises(ConfigError, match="batch_size counts slots"):
        streamload.build_loader(cfg, batch_size=3)
    with pytest.raises(ConfigError, match="do not split evenly over world_size = 3"):
        streamload.build_loader(cfg, world_size=3, rank=0)
    with pytest.raises(ConfigError, match="evaluation pass has no curriculum"):
        streamload.build_loader(cfg, split="valid")
    with pytest.raises(ConfigError, match="no length has enough pieces"):
        streamload.build_loader(vsl_config(corpus, tokens_per_batch=64 * 4096))
    with pytest.raises(ConfigError, match="differs from seq_len"):
        streamload.build_loader(vsl_config(corpus, max_seq_len=32))
    with pytest.raises(ConfigError, match="num_cycles"):
        streamload.build_loader(vsl_config(corpus, num_cycles=2))
    with pytest.raises(ConfigError, match="batch_size is required"):
        streamload.build_loader(corpus.config())


def test_the_piece_plan_is_cached_and_mapped(corpus: Corpus, tmp_path: Any) -> None:
    cfg = vsl_config(corpus, cache_dir=str(tmp_path))
    first = streamload.build_loader(cfg)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert any("streamload-vsl" in f for f in files)
    again = streamload.build_loader(cfg)
    assert again.stream.sources[0]._arrays.files is not None
    assert [b["input_ids"].tolist() for b in again] == [b["input_ids"].tolist() for b in first]


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    sizes=st.lists(st.integers(200, 3000), min_size=1, max_size=3),
    low_exp=st.integers(2, 4),
    span=st.integers(0, 3),
    slots=st.sampled_from([1, 2, 4]),
    world=st.sampled_from([1, 2]),
    curriculum=st.sampled_from(["natural", "grow_p2", "cyclic_p2"]),
    seed=st.integers(0, 1000),
)
def test_any_corpus_steps_hold_their_tokens_and_pieces_once(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: list[int],
    low_exp: int,
    span: int,
    slots: int,
    world: int,
    curriculum: str,
    seed: int,
) -> None:
    corpus = write_corpus(tmp_path_factory.mktemp("vslh"), sizes, mean_doc_len=40.0, seed=seed)
    low, top = 1 << low_exp, 1 << (low_exp + span)
    tokens = slots * top * world
    cfg = corpus.config(
        seq_len=top,
        seed=seed,
        sampling={
            "mode": "vsl",
            "min_seq_len": low,
            "tokens_per_batch": tokens,
            "curriculum": curriculum,
        },
    )
    try:
        loader = streamload.build_loader(cfg, world_size=world, rank=world - 1)
    except ConfigError as exc:
        assert "no length has enough pieces" in str(exc) or "no piece" in str(exc)
        return
    seen: list[int] = []
    batches, states = [], []
    for batch in loader:
        assert batch["input_ids"].numel() * world == tokens
        seen += batch["sample_index"].tolist()
        batches.append(batch["input_ids"].tolist())
        states.append(loader.state_dict())
    assert len(seen) == len(set(seen))
    assert loader.stats()["sources"]["web"]["tokens"] == len(loader) * tokens
    # a state saved after any batch resumes on the next one, here at world size 1
    at = seed % len(batches)
    whole = streamload.build_loader(cfg)
    whole.load_state_dict(states[at])
    left = len(batches) - at - 1  # a state at the pass end resumes with the next pass
    rest = [b["input_ids"] for b in whole][: left or None]
    assert len(rest) == left or (left == 0 and len(rest) == len(batches))
    if left:  # the last rank holds each step's last rows
        mine = [r[-len(b) :].tolist() for r, b in zip(rest, batches[at + 1 :], strict=True)]
        assert mine == batches[at + 1 :]


def test_loss_masks_from_data_mask_labels(tmp_path: Any) -> None:
    from tests.streams.test_loss_masks import trained, write_datatrove

    write_datatrove(tmp_path / "dt", 12000)
    source = {"name": "sft", "path": str(tmp_path / "dt")}
    cfg = {
        "seq_len": 32,
        "eos_token_id": 0,
        "sources": [source],
        "sampling": {"mode": "vsl", "min_seq_len": 4, "tokens_per_batch": 128},
    }
    plain = epoch({**cfg, "sources": [{**source, "label_masks": "none"}]})
    masked = epoch(cfg)
    assert len(plain) == len(masked) and any((b["labels"] == -100).any() for b in masked)
    for want, got in zip(plain, masked, strict=True):
        labels = want["labels"].numpy()
        expected = np.where(trained(labels), labels, -100)
        assert got["labels"].tolist() == expected.tolist()
        assert torch.equal(got["input_ids"], want["input_ids"])


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> tuple[Corpus, Corpus]:
    root = tmp_path_factory.mktemp("vslmix")
    long = write_corpus(root / "long", [9000, 3000], mean_doc_len=90.0, seed=4)
    short = write_corpus(root / "short", [4000], mean_doc_len=12.0, seed=5)
    return long, short


def mixture(two: tuple[Corpus, Corpus], weights: tuple[float, float]) -> dict[str, Any]:
    long, short = two
    return {
        "seq_len": 64,
        "eos_token_id": 0,
        "sources": [
            {"name": "long", "path": str(long.folder), "weight": weights[0]},
            {"name": "short", "path": str(short.folder), "weight": weights[1]},
        ],
        "sampling": {"mode": "vsl", "min_seq_len": 4, "tokens_per_batch": 512},
    }


def test_a_mixture_splits_each_step_by_weight(two: tuple[Corpus, Corpus]) -> None:
    cfg = mixture(two, (0.25, 0.75))
    loader = streamload.build_loader(cfg)
    stream = loader.stream
    has = [[s.pieces.count(k) > 0 for s in stream.sources] for k in range(len(stream.lengths))]
    deviation = np.zeros(2)
    for batch in loader:
        rows, length = batch["input_ids"].shape
        assert rows * length == 512
        counts = np.bincount(batch["source_ids"].numpy(), minlength=2)
        bucket = stream.lengths.index(length)
        if all(has[bucket]):  # both sources: the weight's rows, to within two
            want = np.array([0.25, 0.75]) * rows
            assert (np.abs(counts - want) <= 2).all()
            deviation[0] += counts[0] - want[0]
        else:  # a source without pieces of this length gives its rows to the other
            assert counts[int(np.argmax(has[bucket]))] == rows
    assert abs(deviation[0]) <= 2 * len(stream.lengths)  # row patterns: two rows per length
    # rows are the sources' data: each row is L + 1 tokens of its source at its piece's start
    first = next(iter(streamload.build_loader(cfg)))
    sources, pieces = stream.step_rows(0, 0)
    for row, (s, piece) in enumerate(zip(sources.tolist(), pieces.tolist(), strict=True)):
        start = int(stream.sources[s].pieces.starts[piece])
        tokens = two[s].stream[start : start + first["input_ids"].shape[1]]
        assert first["input_ids"][row].tolist() == tokens.astype(np.int64).tolist()
        assert int(first["source_ids"][row]) == s


def test_a_mixture_resumes_exactly_on_another_world_size(two: tuple[Corpus, Corpus]) -> None:
    cfg = mixture(two, (0.5, 0.5))
    reference = epoch(cfg, 2, 1)
    assert_resumes_exactly(
        lambda: streamload.build_loader(cfg, world_size=2, rank=1),
        save_points=[0, 3, len(reference) - 1],
        passes=2,
    )
    saved = streamload.build_loader(cfg, world_size=2, rank=1)
    it = iter(saved)
    for _ in range(4):
        next(it)
    state = saved.state_dict()
    assert state["fingerprint"]["vsl"]["schedule"] == [[0, [0.5, 0.5]]]
    whole = epoch(cfg)[4:]
    resumed = streamload.build_loader(cfg)
    resumed.load_state_dict(state)
    assert [b["input_ids"].tolist() for b in resumed] == [b["input_ids"].tolist() for b in whole]
    other = streamload.build_loader(mixture(two, (0.4, 0.6)))
    with pytest.raises(StateError, match=r"vsl\.schedule"):
        other.load_state_dict(state)


def test_a_schedule_changes_the_weights_at_its_step(two: tuple[Corpus, Corpus]) -> None:
    cfg = mixture(two, (0.5, 0.5)) | {
        "schedule": [{"start_step": 6, "weights": {"long": 1, "short": 0}}]
    }
    loader = streamload.build_loader(cfg)
    stream = loader.stream
    batches = list(loader)
    for step, batch in enumerate(batches):
        length = batch["input_ids"].shape[1]
        has = [s.pieces.count(stream.lengths.index(length)) > 0 for s in stream.sources]
        counts = np.bincount(batch["source_ids"].numpy(), minlength=2)
        if step >= 6 and has[0]:
            assert counts[1] == 0  # the phase's weights from its first step on
        elif all(has):
            assert abs(int(counts[0]) - int(counts[1])) <= 1
    # exact resume before, at and after the phase start, at another world size
    for at in (3, 6, 9):
        saved = streamload.build_loader(cfg)
        it = iter(saved)
        for _ in range(at):
            next(it)
        half = streamload.build_loader(cfg, world_size=2, rank=1)
        half.load_state_dict(saved.state_dict())
        got = [b["input_ids"] for b in half]
        want = [b["input_ids"][b["input_ids"].shape[0] // 2 :] for b in batches[at:]]
        assert [g.tolist() for g in got] == [w.tolist() for w in want]
    # a phase may be added for the future between a save and a resume
    early = streamload.build_loader(mixture(two, (0.5, 0.5)))
    it = iter(early)
    for _ in range(3):
        next(it)
    later = streamload.build_loader(cfg)
    later.load_state_dict(early.state_dict())
    assert [b["input_ids"].tolist() for b in later] == [
        b["input_ids"].tolist() for b in batches[3:]
    ]


def test_source_policies_are_refused_in_vsl_mode(two: tuple[Corpus, Corpus]) -> None:
    cfg = mixture(two, (0.5, 0.5))
    cfg["sources"][1]["max_epochs"] = 2
    with pytest.raises(ConfigError, match="source 'short': policy = 'stop' and max_epochs"):
        streamload.load_config(cfg)


def test_a_table_curriculum_orders_the_epoch_by_its_phases(corpus: Corpus) -> None:
    table = [
        {"start_step": 0, "weights": {"8": 1, "16": 1}},
        {"start_step": 12, "weights": {"64": 1}},
    ]
    cfg = vsl_config(corpus, curriculum=table)
    loader = streamload.build_loader(cfg)
    lengths = [b["input_ids"].shape[1] for b in loader]
    stream = loader.stream
    plain = streamload.build_loader(vsl_config(corpus))
    assert sorted(lengths) == sorted(b["input_ids"].shape[1] for b in plain)  # the same batches
    short = sum(n for n, length in zip(stream.batches, stream.lengths, strict=True) if length < 32)
    first = lengths[1:12]  # the first phase: its lengths while they last, then the others
    assert lengths[0] == 64 and sum(n in (8, 16) for n in first) == min(11, short)
    assert sum(n in (8, 16) for n in lengths[12:]) == short - min(11, short)
    assert loader.state_dict()["fingerprint"]["vsl"]["curriculum"][1] == [12, {"64": 1}]
    with pytest.raises(ConfigError, match="length"):
        streamload.load_config(
            vsl_config(corpus, curriculum=[{"start_step": 0, "weights": {"9": 1}}])
        )
