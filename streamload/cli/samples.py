"""``streamload samples``: write the tokens of global sample positions to a ``.npy`` file.

Lets anyone see what a training step contains without GPUs::

    streamload samples data.toml --start 0 --count 16 --out s.npy
    streamload samples data.toml --start 0 --count 64 \
        --rank 1 --world-size 4 --batch-size 2 --out r1.npy

With ``sampling.mode = "megatron"`` the rows are megatron-core's ``text`` arrays
(``seq_len + 1`` tokens, or ``seq_len`` without the extra token; pad -1), see docs/megatron.md.

With ``sampling.mode = "vsl"`` ``--start``/``--count`` are steps, whose rows have each
step's own length: the output is a ``.npz`` with ``step_K`` (``[rows, L + 1]``) per step and
``lengths`` (``--rank --world-size`` keep that rank's rows; ``--batch-size`` is implied)::

    streamload samples vsl.toml --start 0 --count 8 --out steps.npz
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from streamload.cli._common import add_pass_argument
from streamload.config import load_config
from streamload.errors import ConfigError
from streamload.modes import SamplesRequest, get_mode

if TYPE_CHECKING:  # numpy and the streams load when the command runs, not for --help
    import numpy as np

    from streamload.plan.step_sizes import StepSizes
    from streamload.streams.interface import SampleStream

__all__ = ["add_parser", "rank_positions", "run", "write_rows"]


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("samples", help="write global samples [K, K+N) as an int64 .npy array")
    p.add_argument("config", help="TOML/YAML/JSON data config")
    p.add_argument(
        "--start", type=int, required=True, help="first global sample position K (vsl: step)"
    )
    p.add_argument("--count", type=int, required=True, help="number of positions N (vsl: steps)")
    add_pass_argument(p)
    p.add_argument("--rank", type=int, help="keep only the rows this DP rank receives")
    p.add_argument("--world-size", type=int, help="DP world size W (with --rank)")
    p.add_argument("--batch-size", type=int, help="per-rank batch size b (with --rank)")
    p.add_argument("--out", required=True, help="output .npy path (vsl mode: .npz)")
    p.set_defaults(run=run)


def rank_positions(
    start: int,
    count: int,
    rank: int,
    world_size: int,
    batch_size: int,
    pass_length: int | None,
    grad_accum_steps: int = 1,
    steps: StepSizes | None = None,
) -> np.ndarray:
    """Global positions in ``[start, start + count)`` that ``rank`` receives, in its order.

    In global batch k (``B = world_size * batch_size``) rank r gets positions
    ``k*B + r*b .. k*B + r*b + b - 1``; positions in the dropped partial last optimizer step
    of a pass (``grad_accum_steps`` global batches, or ``steps``: the sizes of a batch size
    schedule) are never delivered and are left out.
    """
    import numpy as np

    from streamload.plan.step_sizes import StepSizes

    if not 0 <= rank < world_size or batch_size < 1:
        raise ConfigError(f"--rank {rank} must be in [0, {world_size}) and --batch-size >= 1")
    global_batch = world_size * batch_size
    positions = np.arange(start, start + count, dtype=np.int64)
    if pass_length is None:  # an endless mixture delivers every position
        delivered = np.ones(positions.shape, dtype=bool)
    else:
        sizes = steps or StepSizes.constant(grad_accum_steps * global_batch)
        delivered = positions < sizes.whole_end(0, pass_length)
    mine = (positions % global_batch) // batch_size == rank
    return positions[mine & delivered]


def run(args: argparse.Namespace) -> int:
    """Write the samples; returns the exit code."""
    from streamload.modes import build_stream

    stream = build_stream(load_config(args.config))
    request = SamplesRequest(
        args.pass_index,
        args.start,
        args.count,
        args.rank,
        args.world_size,
        args.batch_size,
        args.out,
    )
    write = get_mode(stream.config.sampling.mode_name).write_samples or write_rows
    print(write(stream, request))
    return 0


def write_rows(stream: SampleStream, request: SamplesRequest) -> str:
    """Rows of one width: positions ``[start, start + count)`` (a rank's share of them with
    ``rank``, ``world_size`` and ``batch_size``) into an int64 ``.npy``; returns what it wrote.

    Raises:
        ConfigError: a range outside the pass, or rank arguments that do not go together.
    """
    import numpy as np

    length = stream.pass_length
    start, count = request.start, request.count
    if start < 0 or count < 0 or (length is not None and start + count > length):
        raise ConfigError(
            f"--start {start} --count {count} is outside the pass of {length} samples"
        )
    positions = np.arange(start, start + count, dtype=np.int64)
    by_rank = (request.rank, request.world_size, request.batch_size)
    if any(v is not None for v in by_rank):
        if request.rank is None or request.world_size is None or request.batch_size is None:
            raise ConfigError("--rank, --world-size and --batch-size go together")
        from streamload.config.batch_schedule import step_sizes

        micro = request.world_size * request.batch_size
        steps = step_sizes(stream.config, micro, request.pass_index)
        positions = rank_positions(
            start, count, request.rank, request.world_size, request.batch_size, length, steps=steps
        )
    tokens, _ = stream.read(request.pass_index, positions)
    np.save(request.out, tokens.astype(np.int64))
    return f"wrote {tokens.shape[0]} samples x {tokens.shape[1]} tokens to {request.out}"
