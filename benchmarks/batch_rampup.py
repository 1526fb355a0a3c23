"""What a batch-size ramp-up costs the loader's planning: chunks planned, states loaded, and the
schedule built, against a constant global batch of the same micro-batches, in one run.

* plan: the positional work of a rank's loader (``SampleStream.plan_chunk`` of chunks of
  ``--chunk`` micro-batches, advancing the cursor), no reads, over ``--batches`` micro-batches
  of 12 ranks x ``--batch-size``; one source, and a mixture of 3 (each step allocated as one
  global batch). Baseline: ``grad_accum_steps`` giving the ramp's final size.
* load: ``StreamLoader.load_state_dict`` of a state saved inside a step (its checks place the
  position in the schedule's steps).
* build: ``plan.step_sizes.megatron_rampup`` for ``--increments`` segments (once per process:
  cached by the config).

Example:
    python benchmarks/batch_rampup.py --batches 4000 --repeats 5
"""

from __future__ import annotations

import argparse
import time
import warnings
from typing import Any

from _common import add_common_args, bench_config, emit, ensure_corpus, int_list, median

import streamload
from streamload.plan.step_sizes import megatron_rampup
from streamload.state import make_state
from streamload.streams.cursor import step_size_at

WORLD = 12
COLUMNS = [
    ("case", "case", ""),
    ("schedule", "schedule", ""),
    ("us", "µs per micro-batch (median)", ".2f"),
    ("ratio", "/ constant", ".3f"),
]


def configs(paths: list[str], seq_len: int, micro: int, samples: int) -> dict[str, Any]:
    """The cases: (one source | a mixture) x (constant | ramp), same micro-batches."""
    final = 16 * micro
    one = bench_config(paths, seq_len=seq_len)
    mix = {**one, "global_batch_size": final}
    mix["sources"] = [
        {"name": f"s{i}", "path": list(paths), "weight": w} for i, w in enumerate((0.5, 0.3, 0.2))
    ]
    out = {}
    for case, base in (("one source", one), ("mixture of 3", mix)):
        out[case, "constant"] = {**base, "global_batch_size": final, "grad_accum_steps": 16}
        out[case, "ramp"] = {
            **base,
            "global_batch_size": final,
            "rampup_batch_size": [micro, micro, samples],
        }
    return out


def plan_time(stream: Any, batches: int, chunk: int, micro: int, b: int) -> float:
    """Seconds to plan ``batches`` micro-batches of rank 0 in chunks, as ``PlanChunks``."""
    cursor, done = stream.start(), 0
    started = time.perf_counter()
    while done < batches:
        planned = stream.plan_chunk(cursor, min(chunk, batches - done), micro, WORLD, 0)
        assert planned is not None, "the pass ended: raise the corpus or lower --batches"
        plan, cursor = planned
        done += plan.sample_ids.shape[0]
    return time.perf_counter() - started


def load_time(cfg: dict[str, Any], b: int, state: dict[str, Any]) -> float:
    loader = streamload.build_loader(cfg, batch_size=b, rank=0, world_size=WORLD)
    started = time.perf_counter()
    loader.load_state_dict(state)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    add_common_args(parser)
    parser.add_argument("--batch-size", type=int, default=8, help="per-rank micro-batch")
    parser.add_argument("--batches", type=int, default=4000, help="micro-batches planned")
    parser.add_argument("--chunk", type=int, default=16, help="micro-batches per chunk")
    parser.add_argument("--tokens", type=int, default=20_000_000, help="corpus tokens")
    parser.add_argument("--increments", type=int_list, default=[15, 1000, 100_000])
    parser.set_defaults(seq_len=16, shard_tokens=10_000_000)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # each pass's dropped partial step
    micro = WORLD * args.batch_size
    paths = ensure_corpus(args.data_dir, args.tokens, args.shard_tokens)
    ramp_samples = args.batches * micro // 3  # the ramp ends a third of the way in
    cases = configs(paths, args.seq_len, micro, ramp_samples)
    streams = {key: streamload.build_stream(streamload.load_config(c)) for key, c in cases.items()}
    states = {}
    for key in cases:  # a state half-way: inside a step, past the ramp
        stream, at = streams[key], args.batches // 2
        cursor = stream.advance(stream.start(), at, micro)  # as the loader advances
        step = step_size_at(stream, cursor, micro)
        states[key] = make_state(stream, cursor, batches=at, global_batch=step)
    timings: dict[Any, list[float]] = {}
    for _ in range(args.repeats):  # interleaved: every case once per repeat
        for key, cfg in cases.items():
            seconds = plan_time(streams[key], args.batches, args.chunk, micro, args.batch_size)
            timings.setdefault(("plan", *key), []).append(seconds / args.batches)
            seconds = load_time(cfg, args.batch_size, states[key])
            timings.setdefault(("load", *key), []).append(seconds)
        for n in args.increments:
            started = time.perf_counter()
            megatron_rampup(96, 96, 5_000_000, 96 + 96 * n)
            timings.setdefault(("build", f"{n} increments", "ramp"), []).append(
                time.perf_counter() - started
            )
    rows = []
    for (what, case, schedule), values in timings.items():
        base = timings.get((what, case, "constant"))
        us = median(values) * 1e6
        label = {"plan": "plan", "load": "load_state_dict (µs per load)", "build": "build (µs)"}
        rows.append(
            {
                "case": f"{label[what]}: {case}",
                "schedule": schedule,
                "us": us,
                "ratio": us / (median(base) * 1e6) if base else float("nan"),
            }
        )
    notes = [
        f"{WORLD} ranks x batch size {args.batch_size} = micro-batches of {micro}; ramp "
        f"[{micro}, {micro}, {ramp_samples}] to {16 * micro} (15 increments), constant: "
        f"grad_accum_steps 16 ({16 * micro} a step); chunks of {args.chunk}; medians of "
        f"{args.repeats} interleaved repeats",
        "build: megatron_rampup(96, 96, 5,000,000, 96 + 96 n), once per process (cached)",
        "a mixture allocates per optimizer step: the ramp's smaller steps mean more steps per "
        "micro-batch (and more to replay when a state loads), hence its ratio; one source "
        "only walks the step sizes",
    ]
    emit(args, "Batch-size ramp-up: planning and state costs", rows, COLUMNS, notes)


if __name__ == "__main__":
    main()
