"""Megatron-mode loader states: every state the loader can save resumes exactly, and every
impossible one is refused by ``load_state_dict`` with a ``StateError`` naming the field, its
value and what was expected, never turned into an empty or shifted stream.

A Megatron dataset has one pass: pass 0 holds all ``num_samples`` samples, every data epoch
included (the epochs live inside Megatron's document index). A loader iterated again after
the pass stands at ``epoch = 1, cursor.samples = 0`` and yields nothing; no loader ever stands
at ``epoch >= 1`` with samples consumed.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from streamload import build_loader
from streamload.errors import StateError
from streamload.loader import StreamLoader
from tests.streams.test_megatron import config_of, load, prefixes

__all__ = ["prefixes"]  # the module fixture, re-exported for pytest

pytestmark = pytest.mark.filterwarnings("ignore:each pass")

CASE = "gpt_e1_n"  # 62 samples: 15 global batches of 4, 2 samples dropped


def _loader(prefixes: dict[str, str]) -> StreamLoader:
    return build_loader(config_of(CASE, prefixes), batch_size=4)


def _saved_after(prefixes: dict[str, str], batches: int) -> dict[str, Any]:
    loader = _loader(prefixes)
    iterator = iter(loader)
    for _ in range(batches):
        next(iterator)
    return loader.state_dict()


def _edit(state: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    edited = copy.deepcopy(state)
    change(edited)
    return edited


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(state: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = state
        for key in parents:
            target = target[key]
        target[last] = value

    return change


IMPOSSIBLE = [
    # the reported case: a later pass with samples consumed (Megatron has one pass)
    ("epoch", _set("epoch", 1), r"epoch = 1 .*cursor\.samples = 8.*one pass"),
    ("epoch", _set("epoch", 3), r"epoch = 3 .*cursor\.samples = 8.*one pass"),
    # the siblings: out of range, negative, or fields that disagree
    ("cursor.samples", _set("cursor.samples", 63), r"cursor\.samples = 63.*62 samples"),
    ("cursor.samples", _set("cursor.samples", 10**6), r"cursor\.samples = 1000000"),
    ("cursor.samples", _set("cursor.samples", -4), r"cursor\.samples = -4.*>= 0"),
    ("epoch", _set("epoch", -1), r"epoch = -1.*>= 0"),
    ("sources", _set("sources.A.samples", 9), r"sources.*disagree"),
    ("sources", _set("sources.A.epoch", 1), r"sources.*disagree"),
    ("sources", _set("sources", {"B": {"epoch": 0, "samples": 8}}), r"sources"),
]


@pytest.mark.parametrize(
    ("field", "change", "match"), IMPOSSIBLE, ids=[f"{c[0]}-{i}" for i, c in enumerate(IMPOSSIBLE)]
)
def test_impossible_states_are_refused(
    field: str, change: Callable[[dict[str, Any]], None], match: str, prefixes: dict[str, str]
) -> None:
    state = _edit(_saved_after(prefixes, 2), change)
    loader = _loader(prefixes)
    with pytest.raises(StateError, match=match):
        loader.load_state_dict(state)
    assert len(list(loader)) == 15  # the loader is unchanged: still at the start


def test_a_state_after_the_pass_resumes_into_the_empty_second_pass(
    prefixes: dict[str, str],
) -> None:
    """``epoch = 1, samples = 0`` is what a loader iterated again after its pass saves."""
    loader = _loader(prefixes)
    assert len(list(loader)) == 15
    assert list(loader) == []
    state = loader.state_dict()
    assert (state["epoch"], state["cursor"]["samples"]) == (1, 0)
    restored = _loader(prefixes)
    restored.load_state_dict(state)
    assert restored.state_dict()["epoch"] == 1
    assert list(restored) == []


def test_a_state_at_the_end_of_the_pass_resumes_with_nothing_left(
    prefixes: dict[str, str],
) -> None:
    state = _saved_after(prefixes, 15)
    assert (state["epoch"], state["cursor"]["samples"]) == (0, 60)
    restored = _loader(prefixes)
    restored.load_state_dict(state)
    assert list(restored) == []


@pytest.mark.parametrize("samples", [0, 5, 61, 62])
def test_any_sample_of_the_pass_is_a_valid_position(samples: int, prefixes: dict[str, str]) -> None:
    """A state from another global batch size (or Megatron's consumed samples) continues at
    exactly ``cursor.samples``."""
    state = _saved_after(prefixes, 0)
    state["cursor"] |= {"samples": samples, "tokens": samples * 16}
    state["sources"]["A"]["samples"] = samples
    loader = _loader(prefixes)
    loader.load_state_dict(state)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batches = list(loader)
    assert len(batches) == (62 - samples) // 4
    if batches:
        got = torch.cat([b["input_ids"] for b in batches]).numpy()
        want = load(CASE)[1]["text"][samples : samples + got.shape[0], :-1]
        np.testing.assert_array_equal(got, want)
