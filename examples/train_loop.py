"""A training loop that checkpoints the model and the loader, and resumes exactly.

    python examples/train_loop.py --data data.toml --steps 200 --ckpt /tmp/ckpt.pt
    # kill it at any point, then run the same command again: it continues on the next sample.

The model is a toy sized to run in seconds on a CPU: an embedding and a head over
``--model-vocab`` classes (default 1024), token ids taken modulo it. With docs/quickstart.md's
config (seq_len 2048) the defaults (20 steps of 4 samples) took 11 s wall and 0.55 GB on a
shared 2-core CPU; ``--model-vocab 50304`` (the config's vocab_size) and ``--batch-size 8``
make a real LM head, which needed 13 GB and 52 s per step there (the former defaults).

Gradient accumulation: draw ``accum`` batches per optimizer step from the same loader; the
loader state after the last micro-batch is the state of the step.

Per-source losses (a mixture's domains): ``batch["source_ids"]`` names each sample's source
(an index into ``loader.source_names``); ``source_loss_sums`` sums the per-token losses and
counts the trained labels per source, so ranks can all-reduce both before dividing.
"""

from __future__ import annotations

import argparse
import os

import torch

import streamload
from streamload.ops.source_losses import mean_loss_by_source, source_loss_sums


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True, help="data config (TOML/YAML/JSON)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--ckpt", default="/tmp/streamload-example.pt")
    parser.add_argument("--save-every", type=int, default=5)
    parser.add_argument(
        "--model-vocab", type=int, default=1024,
        help="classes of the toy model; token ids are taken modulo it (default 1024)",
    )  # fmt: skip
    parser.add_argument("--dim", type=int, default=64, help="embedding width (default 64)")
    args = parser.parse_args()

    loader = streamload.build_loader(
        args.data, batch_size=args.batch_size, num_workers=args.num_workers
    )
    names = loader.source_names
    vocab, dim = args.model_vocab, args.dim
    model = torch.nn.Sequential(torch.nn.Embedding(vocab, dim), torch.nn.Linear(dim, vocab))
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = 0
    if os.path.exists(args.ckpt):
        ckpt = torch.load(args.ckpt, weights_only=False)
        model.load_state_dict(ckpt["model"])
        optim.load_state_dict(ckpt["optim"])
        loader.load_state_dict(ckpt["data"])
        step = ckpt["step"]
        print(f"resumed at step {step}: {ckpt['data']['cursor']}")

    while step < args.steps:
        for batch in loader:  # one pass; the next `for` starts the next pass
            labels = batch["labels"]
            labels = torch.where(labels == -100, labels, labels % vocab)  # the toy's classes
            logits = model(batch["input_ids"] % vocab)
            token_losses = torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="none"
            ).view(labels.shape)
            trained = (labels != -100).sum().clamp(min=1)
            loss = token_losses.sum() / trained
            optim.zero_grad()
            loss.backward()
            optim.step()
            step += 1
            if step % args.save_every == 0:
                state = {
                    "model": model.state_dict(),
                    "optim": optim.state_dict(),
                    "data": loader.state_dict(),
                    "step": step,
                }
                torch.save(state, args.ckpt)
                sums, counts = source_loss_sums(  # all-reduce both first when distributed
                    token_losses.detach(), labels, batch["source_ids"], len(names)
                )
                by_source = mean_loss_by_source(sums, counts, names)
                print(f"step {step} loss {loss.item():.3f} {by_source} saved")
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
