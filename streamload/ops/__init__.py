"""Pure batch kernels (numpy, vectorized over a chunk): packing masks from document starts,
Megatron's masks, the flattening of ``cu_seqlens`` for varlen attention and per-source loss
sums (torch)."""

from streamload.ops.masks import packing_fields, starts_from_eos

__all__ = ["packing_fields", "starts_from_eos"]
