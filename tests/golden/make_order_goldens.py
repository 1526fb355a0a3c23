"""Write ``orders.json``: the orders the planning rules give for fixed inputs (issue 36, item 19).

Mixture allocations (ties, weights whose float sums round, schedules, temperatures), vsl
apportionments, curricula and row patterns, and Megatron blends with exact ties: the inputs
where a rule decided by float rounding would give another order on another machine or
Python version. ``tests/test_order_goldens.py`` recomputes every entry and compares; run
this script again only for an intended change of order, and say so in the commit.

Usage (from the repository root): ``python tests/golden/make_order_goldens.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere: this checkout's package
    sys.path.insert(0, str(ROOT))

from streamload.plan.megatron_blend import (  # noqa: E402
    blend_sizes,
    build_blending_indices,
    build_exhaustive_blending_indices,
    normalize,
)
from streamload.plan.mixture import MixtureCursor, Phase, allocate_batches, effective_weights  # noqa: E402
from streamload.plan.vsl_curriculum import apportion, epoch_order, table_order  # noqa: E402
from streamload.plan.vsl_mixture import bucket_weights, row_pattern  # noqa: E402

OUT = Path(__file__).with_name("orders.json")

MIXTURES: dict[str, dict[str, Any]] = {
    "seventy_thirty_b4": {"phases": [[0, [0.7, 0.3]]], "batch": 4},
    "seventy_thirty_b10": {"phases": [[0, [0.7, 0.3]]], "batch": 10},
    "three_way_tie_b4": {"phases": [[0, [1, 1, 1]]], "batch": 4},
    "halves_quarters_b3": {"phases": [[0, [0.5, 0.25, 0.25]]], "batch": 3},
    "tenths_b10": {"phases": [[0, [0.1, 0.2, 0.7]]], "batch": 10},
    "tenths_b7": {"phases": [[0, [0.1, 0.2, 0.7]]], "batch": 7},
    "megatron_tie_weights_b5": {"phases": [[0, [1.5, 2.25, 0.75]]], "batch": 5},
    "schedule_b6": {"phases": [[0, [0.6, 0.4]], [4, [0.25, 0.75]], [9, [1, 1]]], "batch": 6},
    "temperature_2_b8": {"phases": [[0, [16, 4, 1]]], "batch": 8, "temperature": 2.0},
    "temperature_half_b8": {"phases": [[0, [0.7, 0.2, 0.1]]], "batch": 8, "temperature": 0.5},
}
MIXTURE_BATCHES = 16

APPORTIONS = [
    [10, [1, 1, 1]],
    [7, [0.5, 0.25, 0.25]],
    [100, [0.1, 0.2, 0.7]],
    [10, [0.1, 0.2, 0.7]],
    [4096, [1 / 3, 1 / 3, 1 / 3]],
    [5, [1, 2, 3, 4]],
    [9, [0.3, 0.3, 0.4]],
]
CURRICULA = [["natural", 1], ["grow_p2", 2], ["grow_linear", 2], ["cyclic_p2", 3]]
CURRICULUM_BATCHES = [5, 7, 3, 9]
PATTERNS = [[[0.7, 0.2, 0.1], 12], [[1, 1, 1], 8], [[0.1, 0.2, 0.7], 10]]
BLENDS = [
    ["megatron_three_way_tie", [1.5, 2.25, 0.75], 7],
    ["two_way_tie", [1, 1], 9],
    ["seventy_thirty", [0.7, 0.3], 10],
    ["tenths", [0.1, 0.2, 0.7], 20],
]


def mixture_order(case: dict[str, Any]) -> dict[str, Any]:
    """Sources of every sample of the first batches, one string per batch, and the phases'
    weights as float hex (they enter the fingerprint)."""
    temperature = case.get("temperature", 1.0)
    phases = tuple(
        Phase(start, tuple(effective_weights(np.array(w, float), temperature).tolist()))
        for start, w in case["phases"]
    )
    count = len(phases[0].weights)
    sources, _, _ = allocate_batches(
        phases, case["batch"], MixtureCursor.start(count), MIXTURE_BATCHES
    )
    return {
        "weights": [[float(x).hex() for x in p.weights] for p in phases],
        "batches": ["".join(str(s) for s in row) for row in sources.tolist()],
    }


def curriculum_order(name: str, cycles: int) -> list[int]:
    order = epoch_order(CURRICULUM_BATCHES, name, cycles)
    bucket, _ = order.locate(np.arange(order.steps), (7, 0, "golden"))
    return bucket.tolist()


def goldens() -> dict[str, Any]:
    """Every golden order, recomputed by this checkout's code."""
    table = table_order([6, 6, 6], [0, 4], np.array([[0.5, 0.25, 0.25], [1 / 3, 1 / 3, 1 / 3]]))
    table_buckets, _ = table.locate(np.arange(table.steps), None)
    blends = {}
    for name, raw, size in BLENDS:
        sizes = blend_sizes(raw, size)
        index, _ = build_blending_indices(normalize(normalize(raw)), sizes.total)
        blends[name] = {"target": list(sizes.target), "index": index.tolist()}
    exhaustive, _ = build_exhaustive_blending_indices([3, 2, 2])
    blends["exhaustive_3_2_2"] = {"target": [3, 2, 2], "index": exhaustive.tolist()}
    patterns = []
    for weights, rows in PATTERNS:
        pattern = row_pattern(bucket_weights(np.array(weights, float), np.ones(3, bool)), rows)
        patterns.append({"counts": pattern.counts.tolist(), "head": pattern.sources[:24].tolist()})
    return {
        "mixtures": {name: mixture_order(case) for name, case in MIXTURES.items()},
        "apportion": [apportion(total, w).tolist() for total, w in APPORTIONS],
        "curricula": {f"{n}_{c}": curriculum_order(n, c) for n, c in CURRICULA},
        "table": table_buckets.tolist(),
        "row_patterns": patterns,
        "megatron_blends": blends,
    }


if __name__ == "__main__":
    OUT.write_text(json.dumps(goldens(), indent=1) + "\n")
    print(f"wrote {OUT}")
