"""Pure planning functions: no I/O, no state. Inputs and outputs are numpy arrays and ints."""

from streamload.plan.partition import batch_sample_ids, chunk_sample_ids, num_batches, rank_share
from streamload.plan.passes import PassPlan
from streamload.plan.permutation import KeyedPermutation, derive_key
from streamload.plan.windows import WindowLayout

__all__ = [
    "KeyedPermutation",
    "PassPlan",
    "WindowLayout",
    "batch_sample_ids",
    "chunk_sample_ids",
    "derive_key",
    "num_batches",
    "rank_share",
]
