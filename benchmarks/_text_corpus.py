"""The corpus of ``text_source.py``: English-like JSONL text and a BPE trained on it.

Words are made up (1-4 syllables of common English onsets, vowels and codas, 40,000 of them,
shortest most frequent) and drawn with Zipf frequencies; documents are log-normal in length
(median 250 words), cut into capitalized sentences of 4-24 words (some commas, numbers and
questions) and paragraphs of 1-7 sentences. The tokenizer is a GPT-2-like byte-level BPE
trained with ``tokenizers`` on the first two files: no real ``tokenizer.json`` can be
fetched offline. Everything is seeded and written once into its folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

__all__ = ["make_corpus", "make_tiny_corpus", "train_tokenizer"]

LEXICON = 40_000
ZIPF = 1.07


def _lexicon(rng: np.random.Generator) -> list[str]:
    """Made-up words of 1-4 syllables, shortest first (the frequent ones are short)."""
    clusters = ["br", "ch", "cl", "dr", "fl", "gr", "pl", "sh", "st", "th", "tr"]
    onsets = ["", *"bcdfghjklmnprstvwz", *clusters]
    vowels = ["a", "e", "i", "o", "u", "ea", "ou", "io", "ai", "y"]
    codas = ["", "", "", "n", "r", "s", "t", "l", "nd", "ng", "st", "ck", "m"]
    words: set[str] = set()
    while len(words) < LEXICON:
        count = int(rng.integers(1, 5))
        words.add(
            "".join(
                onsets[rng.integers(len(onsets))]
                + vowels[rng.integers(len(vowels))]
                + codas[rng.integers(len(codas))]
                for _ in range(count)
            )
        )
    return sorted(words, key=lambda w: (len(w), w))


def _document(rng: np.random.Generator, words: np.ndarray) -> str:
    """Sentences of 4-24 words in paragraphs of 1-7 sentences; some commas and numbers."""
    paragraphs, sentences = [], []
    left = len(words)
    at = 0
    while left > 0:
        n = min(left, int(rng.integers(4, 25)))
        sentence = list(words[at : at + n])
        at, left = at + n, left - n
        sentence[0] = sentence[0].capitalize()
        if n > 6 and rng.random() < 0.4:
            sentence[int(rng.integers(2, n - 2))] += ","
        if rng.random() < 0.1:
            sentence.insert(int(rng.integers(0, n)), str(int(rng.integers(1, 3000))))
        sentences.append(" ".join(sentence) + ("?" if rng.random() < 0.05 else "."))
        if rng.random() < 0.2 or left == 0:
            paragraphs.append(" ".join(sentences))
            sentences = []
    return "\n\n".join(paragraphs)


def make_corpus(folder: Path, files: int, mb: float) -> None:
    """``files`` JSONL files of about ``mb`` MB each (written once; a marker says done)."""
    if (folder / "done").exists():
        return
    rng = np.random.default_rng(0)
    lexicon = np.array(_lexicon(rng), dtype=object)
    weights = 1.0 / np.arange(1, LEXICON + 1) ** ZIPF
    weights /= weights.sum()
    (folder / "in").mkdir(parents=True, exist_ok=True)
    for f in range(files):
        lines: list[str] = []
        size = 0
        while size < mb * 1e6:
            count = max(5, int(rng.lognormal(np.log(250), 0.9)))
            text = _document(rng, lexicon[rng.choice(LEXICON, count, p=weights)])
            lines.append(json.dumps({"id": f"{f}-{len(lines)}", "text": text}) + "\n")
            size += len(lines[-1])
        (folder / "in" / f"part_{f:03d}.jsonl").write_text("".join(lines), encoding="utf-8")
    (folder / "done").write_text("")


def make_tiny_corpus(folder: Path, count: int) -> None:
    """``count`` JSONL files of one short document each (written once)."""
    if (folder / "done").exists():
        return
    (folder / "in").mkdir(parents=True, exist_ok=True)
    for i in range(count):
        text = f"Tiny document number {i} says hello to the cache."
        (folder / "in" / f"t_{i:06d}.jsonl").write_text(json.dumps({"text": text}) + "\n")
    (folder / "done").write_text("")


def train_tokenizer(corpus: Path, path: Path, vocab: int) -> None:
    """A GPT-2-like byte-level BPE of ``vocab`` ids trained on the first two files (once)."""
    if path.exists():
        return
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts = [
        json.loads(line)["text"]
        for name in sorted((corpus / "in").glob("*.jsonl"))[:2]
        for line in name.open(encoding="utf-8")
    ]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    tok.train_from_iterator(texts, trainer)
    tok.save(str(path))
