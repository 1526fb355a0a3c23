"""streamload.testing: the exact-resumption checker must pass good loaders and catch bad ones."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torchdata.nodes import Batcher, IterableWrapper, Loader
from torchdata.stateful_dataloader import StatefulDataLoader

from streamload import StreamLoader, build_loader
from streamload.testing import (
    assert_batches_equal,
    assert_resumes_exactly,
    collect_global_batches,
)
from tests.helpers.corpus import write_shards

pytestmark = [
    pytest.mark.filterwarnings("ignore:each pass of"),
    pytest.mark.filterwarnings("ignore:.set_vital. is deprecated"),
]


class Counter:
    """A correct toy loader: ``passes`` of ``size`` batches ``{"x": [pass, i]}``.

    Args:
        size: Batches per pass.
        skip_on_restore: Batches wrongly skipped when a state is loaded.
        restart_on_restore: Ignore loaded states (start over).
        ballast: Bytes of useless tensor data added to the state.
    """

    def __init__(
        self,
        size: int = 5,
        skip_on_restore: int = 0,
        restart_on_restore: bool = False,
        ballast: int = 0,
    ) -> None:
        self.size, self.skip, self.restart, self.ballast = (
            size,
            skip_on_restore,
            restart_on_restore,
            ballast,
        )
        self.pass_index, self.next_batch = 0, 0

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        if self.next_batch >= self.size:
            self.pass_index, self.next_batch = self.pass_index + 1, 0
        while self.next_batch < self.size:
            self.next_batch += 1
            yield {"x": torch.tensor([self.pass_index, self.next_batch - 1])}

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"pass": self.pass_index, "next": self.next_batch}
        if self.ballast:
            state["ballast"] = torch.zeros(self.ballast, dtype=torch.uint8)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not self.restart:
            self.pass_index, self.next_batch = state["pass"], state["next"] + self.skip


def test_a_correct_loader_passes() -> None:
    assert_resumes_exactly(Counter, passes=3)
    assert_resumes_exactly(lambda: Counter(size=40), passes=2)  # the spread of save points


def test_a_skipped_batch_is_named() -> None:
    with pytest.raises(AssertionError, match=r"save point 0 .*batch 0: key 'x'"):
        assert_resumes_exactly(lambda: Counter(skip_on_restore=1), echo=False)
    with pytest.raises(AssertionError, match=r"save point 0 .*is not s: key 'next': 1 instead"):
        assert_resumes_exactly(lambda: Counter(skip_on_restore=1))


def test_an_ignored_state_is_caught() -> None:
    with pytest.raises(AssertionError, match="save point 1"):
        assert_resumes_exactly(lambda: Counter(restart_on_restore=True), save_points=[1])


def test_a_state_holding_data_is_refused() -> None:
    with pytest.raises(AssertionError, match="bytes"):
        assert_resumes_exactly(lambda: Counter(ballast=1 << 20), save_points=[2])
    assert_resumes_exactly(lambda: Counter(ballast=1 << 20), save_points=[2], max_state_bytes=None)


class Opaque:
    """Not a plain value: ``torch.load(weights_only=True)`` refuses it."""


class OpaqueState(Counter):
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "object": Opaque()}


def test_a_state_that_is_not_plain_is_refused() -> None:
    with pytest.raises(AssertionError, match="round-trip"):
        assert_resumes_exactly(OpaqueState, save_points=[1])


class ExtraBatch(Counter):
    """After a restore, the first pass gets one batch too many."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.size += 1


def test_a_longer_resumed_pass_is_caught() -> None:
    with pytest.raises(AssertionError, match="6 batches resumed, the uninterrupted run has 5"):
        assert_resumes_exactly(ExtraBatch, save_points=[0])


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="outside"):
        assert_resumes_exactly(Counter, save_points=[6])
    with pytest.raises(ValueError, match="passes"):
        assert_resumes_exactly(Counter, passes=0)


def test_torchdata_nodes_loader() -> None:
    def make() -> Loader[Any]:
        return Loader(Batcher(IterableWrapper(range(11)), batch_size=3, drop_last=False))

    assert_resumes_exactly(make, passes=2)


@pytest.mark.parametrize(("shuffle", "passes"), [(False, 2), (True, 1)])
def test_stateful_dataloader(shuffle: bool, passes: int) -> None:
    # One pass when shuffling: the loader's generator also seeds each epoch's iterator, so
    # a later epoch depends on more than the saved sampler state (a torchdata matter).
    def make() -> StatefulDataLoader:
        generator = torch.Generator().manual_seed(0)
        return StatefulDataLoader(
            list(range(20)), batch_size=3, shuffle=shuffle, generator=generator
        )

    assert_resumes_exactly(make, passes=passes)


class SkippingLoader(StreamLoader):
    """A StreamLoader with an injected resumption bug: one global batch lost on restore."""

    def load_state_dict(self, state: Any, **kwargs: Any) -> None:
        super().load_state_dict(state, **kwargs)
        self._cursor = self.stream.advance(self._cursor, 1, self.rank.global_batch)


def test_catches_a_stream_loader_that_loses_a_batch(tmp_path: Path) -> None:
    corpus = write_shards(tmp_path, [200, 100])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        good = build_loader(corpus.config(8), batch_size=4)
    stream, rank = good.stream, good.rank
    assert_resumes_exactly(lambda: StreamLoader(stream, rank))
    with pytest.raises(AssertionError, match=r"save point 3 \(pass 0, after batch 3"):
        assert_resumes_exactly(
            lambda: StreamLoader(stream, rank),
            make_resumed=lambda: SkippingLoader(stream, rank),
            save_points=[3],
            echo=False,
        )


def test_collect_global_batches_concatenates_in_rank_order() -> None:
    ranks = [
        [{"x": torch.tensor([0, 1])}, {"x": torch.tensor([4, 5])}],
        [{"x": torch.tensor([2, 3])}, {"x": torch.tensor([6, 7])}],
    ]
    batches = collect_global_batches(ranks)
    assert_batches_equal([{"x": torch.arange(4)}, {"x": torch.arange(4, 8)}], batches)
    assert len(collect_global_batches(ranks, steps=1)) == 1
    with pytest.raises(AssertionError, match=r"ranks \[1\] ended at step 1"):
        collect_global_batches([ranks[0], ranks[1][:1]])


def test_assert_batches_equal_checks_dtype_and_length() -> None:
    one = [{"x": torch.arange(3)}]
    with pytest.raises(AssertionError, match=r"torch\.int32"):
        assert_batches_equal(one, [{"x": torch.arange(3, dtype=torch.int32)}])
    with pytest.raises(AssertionError, match="2 batches"):
        assert_batches_equal(one, one * 2)
    with pytest.raises(AssertionError, match="keys"):
        assert_batches_equal(one, [{"y": torch.arange(3)}])


class Rewriting(Counter):
    """Resumes right, but rewrites a loaded pass-end position in another (equivalent) form."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if self.next_batch == self.size:
            self.pass_index, self.next_batch = self.pass_index + 1, 0


def test_a_state_not_echoed_after_load_is_caught() -> None:
    """grain's contract: ``state_dict()`` after ``load_state_dict(s)`` is ``s``."""
    assert_resumes_exactly(Counter, passes=2)
    with pytest.raises(
        AssertionError, match=r"save point 3 .*is not s: key 'pass': 1 instead of 0"
    ):
        assert_resumes_exactly(lambda: Rewriting(size=3), passes=2, save_points=[3])
    assert_resumes_exactly(lambda: Rewriting(size=3), passes=2, save_points=[3], echo=False)


class RestoresOnce(Counter):
    """Ignores every state after its first one."""

    loaded = False

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not self.loaded:
            super().load_state_dict(state)
        self.loaded = True


def test_restoring_a_used_loader_again_is_checked() -> None:
    with pytest.raises(AssertionError, match="restored again into the used loader"):
        assert_resumes_exactly(RestoresOnce, save_points=[1, 2, 3])
    assert_resumes_exactly(RestoresOnce, save_points=[1, 2, 3], restore_twice=False)


class EmptyEpochAfterTheLoop(Counter):
    """The StreamDataset bug of issue 22: a state saved after a pass's loop ended resumes
    into an empty loop, so a whole epoch is skipped."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.pending_empty = self.next_batch >= self.size

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        if getattr(self, "pending_empty", False):
            self.pending_empty = False
            return iter(())
        return super().__iter__()


def test_an_empty_epoch_after_a_loop_end_state_is_caught() -> None:
    with pytest.raises(AssertionError, match=r"after the loop.*0 batches resumed"):
        assert_resumes_exactly(lambda: EmptyEpochAfterTheLoop(size=3), passes=2)


class MarksRestores(Counter):
    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.restored = True

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "restored": getattr(self, "restored", False)}


class Growing(Counter):
    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        return {**state, "extra": 1} if self.next_batch > 2 else state


def test_structure_and_state_sequence_checks() -> None:
    assert_resumes_exactly(Counter, same_structure=True, same_states=True, passes=2)
    with pytest.raises(AssertionError, match="structure changed"):
        assert_resumes_exactly(Growing, same_structure=True)
    with pytest.raises(AssertionError, match=r"save point 0 .*after 1 batches: key 'restored'"):
        assert_resumes_exactly(MarksRestores, echo=False, same_states=True)
