"""Passes and epochs: sample -> (epoch, slot) -> window id, with and without num_samples."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload.plan.passes import PassPlan
from streamload.plan.permutation import KeyedPermutation, derive_key

SETTINGS = settings(max_examples=40, deadline=None)

windows = st.integers(1, 400)
seeds = st.integers(0, 2**31)


def plan(n: int, seed: int = 0, shuffle: bool = True, num_samples: int | None = None) -> PassPlan:
    return PassPlan(name="web", num_windows=n, seed=seed, shuffle=shuffle, num_samples=num_samples)


@SETTINGS
@given(n=windows, pass_index=st.integers(0, 50))
def test_one_epoch_per_pass(n: int, pass_index: int) -> None:
    p = plan(n)
    assert p.pass_length == n
    epochs, slots = p.epochs_and_slots(pass_index, np.arange(n))
    assert epochs.tolist() == [pass_index] * n
    assert slots.tolist() == list(range(n))


@SETTINGS
@given(n=windows, num_samples=st.integers(1, 2000), pass_index=st.integers(0, 50))
def test_num_samples_walks_epochs(n: int, num_samples: int, pass_index: int) -> None:
    p = plan(n, num_samples=num_samples)
    assert p.pass_length == num_samples
    g = np.arange(num_samples)
    epochs, slots = p.epochs_and_slots(pass_index, g)
    np.testing.assert_array_equal(epochs, g // n)
    np.testing.assert_array_equal(slots, g % n)


@SETTINGS
@given(n=windows, seed=seeds, shuffle=st.booleans(), pass_index=st.integers(0, 20))
def test_each_epoch_is_a_permutation(n: int, seed: int, shuffle: bool, pass_index: int) -> None:
    ids = plan(n, seed, shuffle).window_ids(pass_index, np.arange(n))
    np.testing.assert_array_equal(np.sort(ids), np.arange(n))
    if not shuffle:
        np.testing.assert_array_equal(ids, np.arange(n))


@SETTINGS
@given(n=windows, seed=seeds, shuffle=st.booleans(), num_samples=st.integers(1, 1500))
def test_each_epoch_of_a_long_pass_is_a_permutation(
    n: int, seed: int, shuffle: bool, num_samples: int
) -> None:
    ids = plan(n, seed, shuffle, num_samples).window_ids(0, np.arange(num_samples))
    for start in range(0, num_samples, n):
        epoch = ids[start : start + n]
        assert np.unique(epoch).size == epoch.size  # a partial last epoch has no repeats
        if epoch.size == n:
            np.testing.assert_array_equal(np.sort(epoch), np.arange(n))


@SETTINGS
@given(n=windows, seed=seeds, num_samples=st.integers(1, 1500), pass_index=st.integers(1, 9))
def test_passes_with_num_samples_repeat(
    n: int, seed: int, num_samples: int, pass_index: int
) -> None:
    p = plan(n, seed, num_samples=num_samples)
    g = np.arange(num_samples)
    np.testing.assert_array_equal(p.window_ids(pass_index, g), p.window_ids(0, g))


@SETTINGS
@given(n=windows, seed=seeds, epoch=st.integers(0, 6))
def test_modes_agree_on_each_epoch(n: int, seed: int, epoch: int) -> None:
    """Epoch e is the same permutation whether reached as pass e or inside a long pass."""
    per_epoch = plan(n, seed).window_ids(epoch, np.arange(n))
    long_pass = plan(n, seed, num_samples=(epoch + 1) * n)
    np.testing.assert_array_equal(
        long_pass.window_ids(0, np.arange(epoch * n, (epoch + 1) * n)), per_epoch
    )
    key = derive_key(seed=seed, epoch=epoch, stream="web")
    np.testing.assert_array_equal(per_epoch, KeyedPermutation(n, key)(np.arange(n)))


@SETTINGS
@given(n=windows, seed=seeds, num_samples=st.integers(1, 1500), data=st.data())
def test_any_batch_of_samples_maps_like_the_whole_pass(
    n: int, seed: int, num_samples: int, data: st.DataObject
) -> None:
    """Batches of arbitrary samples (any order, several epochs at once) map consistently."""
    p = plan(n, seed, num_samples=num_samples)
    table = p.window_ids(0, np.arange(num_samples))
    picks = np.array(data.draw(st.lists(st.integers(0, num_samples - 1), min_size=1, max_size=50)))
    np.testing.assert_array_equal(p.window_ids(0, picks), table[picks])


@SETTINGS
@given(n=st.integers(20, 400), seed=seeds)  # n >= 20: see test_permutation
def test_epochs_are_reshuffled(n: int, seed: int) -> None:
    ids = plan(n, seed, num_samples=3 * n).window_ids(0, np.arange(3 * n)).reshape(3, n)
    assert not np.array_equal(ids[0], ids[1])
    assert not np.array_equal(ids[1], ids[2])


def test_docstring_example() -> None:
    """n = 3 windows, N = 7 (the worked example of ``plan/passes.py``)."""
    p = plan(3, num_samples=7)
    epochs, slots = p.epochs_and_slots(0, np.arange(7))
    assert epochs.tolist() == [0, 0, 0, 1, 1, 1, 2]
    assert slots.tolist() == [0, 1, 2, 0, 1, 2, 0]


def test_source_name_is_part_of_the_key() -> None:
    a = PassPlan(name="web", num_windows=50, seed=1, shuffle=True, num_samples=None)
    b = PassPlan(name="code", num_windows=50, seed=1, shuffle=True, num_samples=None)
    assert not np.array_equal(a.window_ids(0, np.arange(50)), b.window_ids(0, np.arange(50)))
