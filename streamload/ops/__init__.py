"""Vectorized batch kernels: gathering windows, packing masks, token checks."""

from streamload.ops.gather import ShardSet
from streamload.ops.masks import packing_fields, starts_from_eos

__all__ = ["ShardSet", "packing_fields", "starts_from_eos"]
