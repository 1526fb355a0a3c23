"""Optimizer step sizes over a run (``plan/step_sizes.py``): megatron-core's ramp-up, exactly.

Golden values come from megatron-core's ``RampupBatchsizeNumMicroBatchesCalculator``
(``tests/fixtures/megatron_rampup/make_golden.py`` wrote them); where megatron-core imports,
random ramps are compared with it live. The walks are checked against the plain rule: step
``k + 1`` begins at ``s_k + gbs(s_k)``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamload.errors import ConfigError
from streamload.plan.step_sizes import StepSizes, megatron_rampup

GOLDEN = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "megatron_rampup" / "golden.json").read_text()
)


def boundaries(sizes: StepSizes, count: int, beyond: int = 0) -> list[int]:
    """The first ``count + 1`` step boundaries from sample 0 by the plain rule, and more up to
    the first one past ``beyond``."""
    out = [0]
    while len(out) <= count or out[-1] <= beyond:
        out.append(out[-1] + sizes.size_at(out[-1]))
    return out


@pytest.mark.parametrize("case", GOLDEN["configs"], ids=lambda c: str(c["rampup_batch_size"]))
def test_every_step_matches_megatron_core(case: dict) -> None:
    sizes = megatron_rampup(*case["rampup_batch_size"], case["global_batch_size"])
    micro = case["micro_batch_size"] * case["data_parallel_size"]
    steps = case["steps"]
    starts = boundaries(sizes, len(steps) - 1)
    assert [[s, sizes.size_at(s), sizes.size_at(s) // micro] for s in starts] == steps
    for consumed, gbs in case["points"]:
        assert sizes.size_at(consumed) == gbs, f"consumed {consumed}"
    sizes.check_divides(micro, "micro")  # megatron-core's consistency check passed too


def test_the_module_example() -> None:
    sizes = megatron_rampup(4, 4, 16, 12)
    assert (sizes.starts, sizes.sizes) == ((0, 8, 16), (4, 8, 12))
    runs = [(r.first_step, r.first_sample, r.size, r.steps) for r in sizes.runs()]
    assert runs == [(0, 0, 4, 2), (2, 8, 8, 1), (3, 16, 12, None)]


def test_megatron_core_live() -> None:
    """Random ramps against megatron-core itself, where it is installed."""
    calculators = pytest.importorskip("megatron.core.num_microbatches_calculator")
    logging.disable(logging.CRITICAL)
    try:
        check_live(calculators.RampupBatchsizeNumMicroBatchesCalculator)
    finally:
        logging.disable(logging.NOTSET)


def check_live(calculator: type) -> None:
    @settings(max_examples=200, deadline=None, derandomize=True)
    @given(
        start=st.integers(1, 200),
        increment=st.integers(1, 64),
        increments=st.integers(1, 50),
        samples=st.integers(1, 10**9),
        probes=st.lists(st.integers(0, 10**9 + 10), max_size=30),
    )
    def compare(
        start: int, increment: int, increments: int, samples: int, probes: list[int]
    ) -> None:
        final = start + increments * increment
        calc = calculator(final, 1, 1, False, 1, start, increment, samples)
        sizes = megatron_rampup(start, increment, samples, final)
        near = [c + d for c in sizes.starts for d in (-1, 0, 1)] + [samples, samples + 1]
        for consumed in [c for c in near + probes if c >= 0]:
            calc.update(consumed, False)
            assert sizes.size_at(consumed) == calc.get_current_global_batch_size(), consumed

    compare()


@st.composite
def schedules(draw: st.DrawFn) -> StepSizes:
    count = draw(st.integers(1, 6))
    gaps = draw(st.lists(st.integers(1, 40), min_size=count - 1, max_size=count - 1))
    sizes = draw(st.lists(st.integers(1, 12), min_size=count, max_size=count))
    starts = [0]
    for gap in gaps:
        starts.append(starts[-1] + gap)
    return StepSizes.from_samples(list(zip(starts, sizes, strict=True)))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(sizes=schedules(), first=st.integers(0, 30), samples=st.integers(0, 200))
def test_walks_follow_the_plain_rule(sizes: StepSizes, first: int, samples: int) -> None:
    starts = boundaries(sizes, first, 10_000)
    begin = starts[first]
    runs, done, size = sizes.walk(begin, samples)
    after = [s for s in starts if begin < s <= begin + samples]
    passed = [b - a for a, b in zip([begin, *after], after, strict=False)]
    assert [s for s, n in runs for _ in range(n)] == passed, "whole steps, in order"
    end = after[-1] if after else begin
    assert done == begin + samples - end
    assert size == (sizes.size_at(end) if done else 0)
    length = begin + samples
    assert sizes.whole_end(begin, length) == end
    run_starts = [(r.first_step, r.first_sample) for r in sizes.runs()]
    assert all(starts[k] == s for k, s in run_starts), "runs begin at step boundaries"
    assert all(a.size != b.size for a, b in zip(sizes.runs(), sizes.runs()[1:], strict=False))
    k = next(i for i, s in enumerate(starts) if s > length) - 1
    assert sizes.step_at(length) == (k, starts[k], starts[k + 1] - starts[k])
    # a constant size may begin a step anywhere (a resumed loader may change it there)
    assert sizes.is_boundary(length) == (sizes.is_constant or length in starts)


def test_a_step_table_begins_each_size_at_its_step() -> None:
    sizes = StepSizes.from_steps([(0, 4), (3, 8), (5, 6)])
    assert boundaries(sizes, 7) == [0, 4, 8, 12, 20, 28, 34, 40]


def test_a_size_the_micro_batch_does_not_divide_names_the_step() -> None:
    sizes = megatron_rampup(4, 2, 40, 12)  # 4, 6, 8, ...: 6 is not a multiple of 4
    with pytest.raises(ConfigError, match=r"optimizer step 3 \(from sample 12\) holds 6 samples"):
        sizes.check_divides(4, "world_size 2 x batch_size 2")
