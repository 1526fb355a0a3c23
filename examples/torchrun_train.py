"""Data-parallel training with torchrun; rank and world size come from torch.distributed.

    torchrun --nproc-per-node 4 examples/torchrun_train.py --data data.toml --ckpt /tmp/dp.pt
    # resume on another number of ranks with the same global batch size:
    torchrun --nproc-per-node 2 examples/torchrun_train.py --data data.toml --ckpt /tmp/dp.pt \
        --global-batch 16

Every rank saves nothing of its own: the loader state is global (the sample cursor), so rank 0
writes it once and every rank of any later world size loads the same state.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist

import streamload


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--global-batch", type=int, default=16)
    parser.add_argument("--ckpt", default="/tmp/streamload-dp.pt")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    world = dist.get_world_size()
    if args.global_batch % world:
        raise SystemExit(f"--global-batch {args.global_batch} is not divisible by {world} ranks")
    loader = streamload.build_loader(args.data, batch_size=args.global_batch // world)
    step = 0
    if os.path.exists(args.ckpt):
        ckpt = torch.load(args.ckpt, weights_only=False)
        loader.load_state_dict(ckpt["data"])
        step = ckpt["step"]
    for batch in loader:
        # ... forward/backward on batch["input_ids"], batch["labels"] ...
        step += 1
        if dist.get_rank() == 0 and step % 10 == 0:
            torch.save({"data": loader.state_dict(), "step": step}, args.ckpt)
            print(f"step {step}: samples {batch['sample_index'].tolist()}")
        if step >= args.steps:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
