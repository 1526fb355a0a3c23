"""The default layout is safe to write into (issue 35): a training loop that edits ``labels``
in place (``labels[labels == pad] = -100``) never changes ``input_ids``, nor any other batch,
and batches it keeps keep their values while the loader reuses its memory for later chunks
(:mod:`streamload.nodes._blocks`) — in every mode (concat, packed, padded, vsl, megatron),
with masks, 0 workers, thread and process workers, and pinned memory (a no-op without CUDA)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from streamload import build_loader
from tests.helpers.corpus_factory import Corpus
from tests.streams.test_megatron import GOLDENS, config_of

pytestmark = pytest.mark.filterwarnings("ignore:each pass of")

Batch = dict[str, torch.Tensor]
COUNT = 14
PAD = 0  # the corpus's EOS: frequent, as a pad id is
WORKERS = [(0, "thread"), (2, "thread"), (2, "process")]


def run(
    cfg: dict[str, Any], workers: tuple[int, str], pin: bool, write: bool
) -> tuple[list[Batch], list[Batch]]:
    """The first batches as delivered (kept, not copied) and as copied on delivery; with
    ``write``, each batch's labels are edited in place after the copy, as a loop does."""
    options = {"worker_type": workers[1], "pin_memory": pin, "chunk_batches": 3}
    held, copies = [], []
    with build_loader(cfg, batch_size=4, num_workers=workers[0], options=options) as loader:
        for batch in loader:
            copies.append({k: v.clone() for k, v in batch.items()})
            if write:
                labels = batch["labels"]
                labels[labels == PAD] = -100
                labels[:, ::3] = -7
                assert torch.equal(batch["input_ids"], copies[-1]["input_ids"])
            held.append(batch)
            if len(held) == COUNT:
                break
    return held, copies


def config(corpus: Corpus, mode: str, masks: bool, tmp: pytest.TempPathFactory) -> dict[str, Any]:
    if mode == "megatron":  # Megatron-Core's own samples (pads -1: input 0, label -100)
        prefixes = GOLDENS.write_datasets(tmp.mktemp("megatron"))
        cfg = config_of("blend_train", prefixes)
        return {**cfg, "eos_token_id": 0, "packing": {"masks": masks}}
    sampling: dict[str, Any] = {"mode": mode, "shuffle": True}
    extra: dict[str, Any] = {}
    if mode == "vsl":  # 4 slots of 16 tokens per batch, pieces of 4 to 16 tokens
        sampling.update(min_seq_len=4, tokens_per_batch=64)
        extra["global_batch_size"] = 4
    return corpus.config(
        seq_len=16, sampling=sampling, pad_token_id=999, packing={"masks": masks}, **extra
    )


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("masks", [False, True])
@pytest.mark.parametrize("mode", ["concat", "packed", "padded", "vsl", "megatron"])
def test_writing_labels_changes_nothing_else(
    make_corpus: Callable[..., Corpus],
    tmp_path_factory: pytest.TempPathFactory,
    mode: str,
    masks: bool,
    workers: tuple[int, str],
) -> None:
    corpus = make_corpus([700, 500], mean_doc_len=9.0)
    cfg = config(corpus, mode, masks, tmp_path_factory)
    _, want = run(cfg, (0, "thread"), pin=False, write=False)
    held, copies = run(cfg, workers, pin=True, write=True)
    assert len(held) == len(copies) == len(want) > 4
    for i, (kept, copy, ref) in enumerate(zip(held, copies, want, strict=True)):
        for key, value in ref.items():  # delivered as the unwritten run's, every key
            assert torch.equal(copy[key], value), (i, key)
        for key, value in kept.items():  # kept: its values, with only the loop's writes
            if key != "labels":
                assert torch.equal(value, ref[key]), (i, key)
        edited = ref["labels"].clone()
        edited[edited == PAD] = -100
        edited[:, ::3] = -7
        assert torch.equal(kept["labels"], edited), i


def test_kept_batches_survive_block_reuse(make_corpus: Callable[..., Corpus]) -> None:
    """Half the batches are dropped as they come (their blocks go back to the pool and are
    reused), half are kept: the kept ones never change."""
    corpus = make_corpus([900])
    cfg = corpus.config(seq_len=16, sampling={"shuffle": True})
    kept, want = [], []
    with build_loader(cfg, batch_size=2, options={"chunk_batches": 2}) as loader:
        for i, batch in enumerate(loader):
            if i % 4 < 2:
                kept.append(batch)
                want.append({k: v.clone() for k, v in batch.items()})
            if i == 40:
                break
    for got, ref in zip(kept, want, strict=True):
        assert all(torch.equal(got[k], ref[k]) for k in ref)
