"""torchtitan's data loader contract, restated where torchtitan is not installed.

What torchtitan 0.3.0 (PyPI; ``torchtitan/components/dataloader.py``, ``trainer.py``) does
with a data loader, written down in our own code so the tests run without it:

* :class:`ParallelAwareDataloader`: its state is ``{"dp_rank_<r>": pickle of the
  StatefulDataLoader state, "world_size": W}`` and loading asserts the same ``W``. Where
  torchtitan is installed the real class is used (and ``tests/integrations`` checks that
  the restatement saves the same keys);
* :func:`trainer_build_kwargs`: the keywords ``Trainer.__init__`` passes to
  ``config.dataloader.build`` (0.3), and :func:`train_spec_kwargs` those 0.1-0.2 passed to
  ``TrainSpec.build_dataloader_fn``;
* :func:`train_steps`: ``Trainer.batch_generator`` and ``post_dataloading_process``: one
  ``iter()`` kept over the whole run, ``input_dict, labels = batch``, ``input_dict["input"]``
  the tokens, every other key a keyword of the model's forward, valid tokens counted as
  ``labels != -100``. ``torchtitan.trainer`` itself imports ``triton``, which a CPU-only
  install lacks, so the trainer's loop is restated even where torchtitan is installed.
"""

from __future__ import annotations

import importlib
import pickle
from collections.abc import Iterable, Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import torch
from torch.utils.data import IterableDataset
from torchdata.stateful_dataloader import StatefulDataLoader

IGNORE_INDEX = -100
"""torchtitan's ``components.loss.IGNORE_INDEX``."""

MODEL_FORWARD_KWARGS = frozenset({"positions", "attention_masks"})
"""Keywords of torchtitan 0.3's ``Decoder.forward(tokens, positions=None,
attention_masks=None)``: every key of ``input_dict`` but ``input`` must be one of them."""


class RestatedParallelAwareDataloader(StatefulDataLoader):
    """torchtitan 0.3.0's ``ParallelAwareDataloader`` state handling, restated."""

    def __init__(
        self, dataset: IterableDataset[Any], dp_rank: int, dp_world_size: int, **kwargs: Any
    ) -> None:
        self.dp_world_size = dp_world_size
        self.dp_rank = dp_rank
        self._rank_id = f"dp_rank_{dp_rank}"
        super().__init__(dataset, **kwargs)

    def state_dict(self) -> dict[str, Any]:
        return {
            self._rank_id: pickle.dumps(super().state_dict()),
            "world_size": self.dp_world_size,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not state_dict or self._rank_id not in state_dict:
            return  # torchtitan logs a warning and starts afresh
        if self.dp_world_size != state_dict["world_size"]:
            raise AssertionError(
                "dp_degree is inconsistent before and after checkpoint, "
                "dataloader resharding is not supported yet."
            )
        super().load_state_dict(pickle.loads(state_dict[self._rank_id]))


def torchtitan_module(name: str) -> ModuleType | None:
    """``torchtitan.<name>`` where torchtitan 0.3 is installed and imports, else None.

    Not ``pytest.importorskip``: torchtitan 0.2 fails inside its own package import on a
    machine without ``triton`` (``ModuleNotFoundError``, then ``KeyError`` on the next try).
    """
    try:
        return importlib.import_module(f"torchtitan.{name}")
    except Exception:  # an absent or broken install alike: the restatement stands in
        return None


def parallel_aware_dataloader() -> type[StatefulDataLoader]:
    """torchtitan's ``ParallelAwareDataloader`` where installed, else the restatement."""
    module = torchtitan_module("components.dataloader")
    if module is None:
        return RestatedParallelAwareDataloader
    return module.ParallelAwareDataloader  # type: ignore[no-any-return]


def trainer_build_kwargs(
    dp_world_size: int, dp_rank: int, seq_len: int, local_batch_size: int
) -> dict[str, Any]:
    """What torchtitan 0.3's ``Trainer.__init__`` passes to ``config.dataloader.build``."""
    return {
        "dp_world_size": dp_world_size,
        "dp_rank": dp_rank,
        "tokenizer": object(),  # the trainer's tokenizer; a pre-tokenized loader ignores it
        "seq_len": seq_len,
        "local_batch_size": local_batch_size,
        "snapshot_every_n_steps": 1,
    }


def train_spec_kwargs(
    dp_world_size: int, dp_rank: int, seq_len: int, local_batch_size: int
) -> dict[str, Any]:
    """What torchtitan 0.1-0.2's trainer passes to ``TrainSpec.build_dataloader_fn``."""
    training = SimpleNamespace(seq_len=seq_len, local_batch_size=local_batch_size)
    return {
        "dp_world_size": dp_world_size,
        "dp_rank": dp_rank,
        "tokenizer": object(),
        "job_config": SimpleNamespace(training=training),
    }


def decoder_forward(
    tokens: torch.Tensor,
    positions: torch.Tensor | None = None,
    attention_masks: Any = None,
) -> torch.Tensor:
    """The signature of torchtitan 0.3's ``Decoder.forward``; returns one-hot logits."""
    if tokens.dtype != torch.int64 or tokens.dim() != 2:
        raise TypeError(f"tokens must be [batch, seq] int64, not {tokens.dtype} {tokens.shape}")
    if positions is not None and positions.shape != tokens.shape:
        raise TypeError(f"positions {tuple(positions.shape)} != tokens {tuple(tokens.shape)}")
    return torch.nn.functional.one_hot(tokens % 16, 16).float()


def train_steps(loader: Iterable[Any], steps: int) -> list[dict[str, torch.Tensor]]:
    """Run ``steps`` training steps the way torchtitan's trainer consumes batches; returns
    what each step fed the model: ``input``, the extra keywords, ``labels``.

    Raises:
        AssertionError: a batch that torchtitan's trainer would reject.
    """
    data_iterator: Iterator[Any] = iter(loader)  # batch_generator: one iterator per run
    fed = []
    for _ in range(steps):
        input_dict, labels = next(data_iterator)
        inputs = input_dict["input"]
        extra_kwargs = {k: v for k, v in input_dict.items() if k != "input"}
        assert set(extra_kwargs) <= MODEL_FORWARD_KWARGS, sorted(extra_kwargs)
        assert labels.shape == inputs.shape and labels.dtype == torch.int64
        assert int((labels != IGNORE_INDEX).sum()) <= labels.numel()
        decoder_forward(inputs, **extra_kwargs)
        fed.append({"input": inputs.clone(), "labels": labels.clone(), **extra_kwargs})
    return fed
