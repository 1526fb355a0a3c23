"""Checkpoint model, optimizer and data loader together with ``torch.distributed.checkpoint``.

    python examples/dcp_checkpoint.py --data data.toml --steps 100 --ckpt /tmp/dcp-ckpt
    torchrun --nproc-per-node 2 examples/dcp_checkpoint.py --data data.toml --ckpt /tmp/dcp-ckpt
    # stop it at any point and run the same command again: it resumes at the last checkpoint
    # on exactly the next sample, with the model and optimizer of that step.

``StreamLoader`` has ``state_dict()`` / ``load_state_dict()``, so it satisfies DCP's
``Stateful`` protocol and goes into the state dict as it is, next to the model:
``dcp.save`` calls ``loader.state_dict()``, ``dcp.load`` fills a fresh loader's state and
calls ``loader.load_state_dict()``. The loader state names the global position (the same on
every rank), so a checkpoint written on N ranks resumes on any other number of ranks with the
same global batch size.
"""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful

import streamload


class ModelState(Stateful):
    """Model and optimizer as one DCP ``Stateful`` (the pattern of the DCP tutorial)."""

    def __init__(self, model: torch.nn.Module, optim: torch.optim.Optimizer) -> None:
        self.model = model
        self.optim = optim

    def state_dict(self) -> dict[str, Any]:
        model, optim = get_state_dict(self.model, self.optim)
        return {"model": model, "optim": optim}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        set_state_dict(
            self.model,
            self.optim,
            model_state_dict=state_dict["model"],
            optim_state_dict=state_dict["optim"],
        )


def latest_checkpoint(root: Path) -> tuple[Path | None, int]:
    """The newest ``step-*`` folder under ``root`` holding a finished checkpoint, and its step."""
    done = sorted(p for p in root.glob("step-*") if (p / ".metadata").exists())
    return (done[-1], int(done[-1].name[5:])) if done else (None, 0)


def train(
    data: Any,
    *,
    steps: int,
    ckpt: str | os.PathLike[str],
    batch_size: int = 8,
    num_workers: int = 0,
    save_every: int = 10,
) -> list[dict[str, Any]]:
    """Train until ``steps`` optimizer steps are done, resuming from the newest checkpoint.

    Returns:
        One record per step trained in this call: ``step``, ``loss`` and ``samples`` (the
        global sample indices of this rank's batch).
    """
    torch.manual_seed(0)
    loader = streamload.build_loader(data, batch_size=batch_size, num_workers=num_workers)
    vocab = loader.stream.config.vocab_size or 65536
    model: torch.nn.Module = torch.nn.Sequential(
        torch.nn.Embedding(vocab, 32), torch.nn.Linear(32, vocab)
    )
    if dist.is_initialized():
        model = torch.nn.parallel.DistributedDataParallel(model)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
    state = {"model": ModelState(model, optim), "data": loader}
    single = not dist.is_initialized()  # one process: DCP needs no process group
    if single:  # ... and says so on every call
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")

    path, step = latest_checkpoint(Path(ckpt))
    if path is not None:
        dcp.load(state, checkpoint_id=path, no_dist=single)
        print(f"resumed at step {step} from {path}: data cursor {loader.state_dict()['cursor']}")

    records: list[dict[str, Any]] = []
    ended = False
    while step < steps and not ended:
        ended = True  # a pass without a batch: the stream has ended (a source policy)
        for batch in loader:  # one pass; the next `for` starts the next pass
            ended = False
            logits = model(batch["input_ids"])
            loss = torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100
            )
            optim.zero_grad()
            loss.backward()
            optim.step()
            step += 1
            records.append(
                {"step": step, "loss": loss.item(), "samples": batch["sample_index"].tolist()}
            )
            if step % save_every == 0:
                dcp.save(state, checkpoint_id=Path(ckpt) / f"step-{step:08d}", no_dist=single)
            if step >= steps:
                break
    loader.close()
    return records


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True, help="data config (TOML/YAML/JSON)")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=8, help="per-rank batch size")
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--ckpt", default="/tmp/streamload-dcp")
    args = parser.parse_args()
    if "WORLD_SIZE" in os.environ:  # started by torchrun
        dist.init_process_group("gloo")
    records = train(
        args.data,
        steps=args.steps,
        ckpt=args.ckpt,
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        save_every=args.save_every,
    )
    if not dist.is_initialized() or dist.get_rank() == 0:
        for record in records[-3:]:
            print(f"step {record['step']} loss {record['loss']:.4f} (rank 0's batch)")
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
