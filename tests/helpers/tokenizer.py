"""A tiny byte-level BPE for tests and golden generators, trained in well under a second."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = ["train_bpe"]


def train_bpe(path: Path, texts: Iterable[str]) -> None:
    """Train a 300-id byte-level BPE on ``texts`` and save it to ``path``; the special
    tokens come first, so ``<|endoftext|>`` is id 0 (EOS) and ``<|bos|>`` id 1 (BOS)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>", "<|bos|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    tok.save(str(path))
