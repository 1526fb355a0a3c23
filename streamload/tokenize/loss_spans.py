"""Loss masks from trained character spans: ``streamload tokenize --loss-spans-field F``.

A document's field ``F`` lists the ``[start, end)`` character offsets of its text that are
trained (the assistant's answer of a chat, say); every other token gets loss mask 0. Offsets
count characters (Python ``str`` indices, what ``json.loads`` gives) of the text as written,
before it is stripped; :func:`parse_spans` checks and shifts them onto the stripped text.

A token is trained when its characters (``Encoding.offsets``, which the ``tokenizers``
library gives in characters) overlap a trained span: a byte-level token ``" hello"`` whose
space lies outside a span starting at ``h`` is trained, and so is every piece of a character
split over several byte tokens. BOS, added by us, is never trained; an EOS we append is
trained exactly when the token before it is (the end of a trained answer is learned, the end
of an untrained prompt is not).

Example: text ``"Q: hi A: yo"``, spans ``[[9, 11]]`` (``"yo"``), a whitespace tokenizer,
EOS appended: tokens ``Q: hi A: yo <eos>`` → mask ``0 0 0 1 1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from streamload.formats.encoder import DocumentEncoder

__all__ = ["Spans", "add_bos_eos", "encode_with_masks", "parse_spans", "token_mask"]

Spans = tuple[tuple[int, int], ...]
"""Trained ``[start, end)`` character ranges of a (stripped) text."""


def parse_spans(value: Any, raw_text: str, text: str) -> Spans:
    """The trained spans a JSON value gives, moved onto the stripped ``text``.

    Args:
        value: The field's value: a list of ``[start, end]`` integer pairs.
        raw_text: The text as written (the offsets' frame).
        text: ``raw_text.strip()`` (what is tokenized).

    Raises:
        ValueError: missing, or not a list of pairs of integers with ``0 <= start <= end
            <= len(raw_text)`` (the message says which and why).
    """
    if value is None:
        raise ValueError(
            f"is missing or null; give [[0, {len(raw_text)}]] to train the whole text, [] "
            "to train none of it"
        )
    if not isinstance(value, list):
        raise ValueError(f"is {type(value).__name__}, not a list of [start, end] pairs")
    lead = len(raw_text) - len(raw_text.lstrip())
    spans = []
    for i, pair in enumerate(value):
        ok = isinstance(pair, list) and len(pair) == 2
        if not ok or not all(isinstance(x, int) and not isinstance(x, bool) for x in pair):
            raise ValueError(f"item {i} is {_short(pair)}, not a [start, end] pair of integers")
        start, end = pair
        if not 0 <= start <= end <= len(raw_text):
            raise ValueError(
                f"item {i} is {pair}; expected 0 <= start <= end <= {len(raw_text)} (the "
                "text's length in characters)"
            )
        s, e = min(max(start - lead, 0), len(text)), min(max(end - lead, 0), len(text))
        if s < e:
            spans.append((s, e))
    return tuple(spans)


def token_mask(offsets: Sequence[tuple[int, int]], spans: Spans, length: int) -> np.ndarray:
    """Which tokens overlap a trained span (bool, one per token).

    Args:
        offsets: Each token's ``[start, end)`` characters in the text.
        spans: Trained character ranges of the text.
        length: The text's length in characters.

    A token of no characters (``start == end``) is trained when its position is.
    """
    if not offsets:
        return np.zeros(0, dtype=bool)
    covered = np.zeros(length + 1, dtype=np.int64)
    for start, end in spans:
        covered[start] += 1
        covered[end] -= 1
    trained_char = np.cumsum(covered)[:length] > 0
    before = np.concatenate([[0], np.cumsum(trained_char)])  # trained chars before position
    at = np.asarray(offsets, dtype=np.int64).reshape(-1, 2).clip(0, length)
    starts, ends = at[:, 0], at[:, 1]
    overlap = before[ends] - before[starts] > 0
    point = np.append(trained_char, False)[starts]  # a token of no characters
    return np.where(ends > starts, overlap, point)


def encode_with_masks(
    encoder: DocumentEncoder, texts: Sequence[str], spans: Sequence[Spans]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Token ids (as :meth:`DocumentEncoder.encode` gives them) and loss masks of ``texts``.

    ``encode_batch`` keeps the offsets that ``encode`` (``encode_batch_fast``) skips; the
    ids are the same, and BOS/EOS follow the encoder's rule (module docstring for their
    mask). Paragraph segmentation is not supported here (the config refuses it).
    """
    encodings = encoder.tokenizer.encode_batch(list(texts), add_special_tokens=False)
    ids_out, masks_out = [], []
    for text, trained, encoding in zip(texts, spans, encodings, strict=True):
        mask = token_mask(encoding.offsets, trained, len(text)).tolist()
        ids, flags = add_bos_eos(encoder, list(encoding.ids), mask)
        ids_out.append(ids)
        masks_out.append(flags)
    return ids_out, masks_out


def add_bos_eos(
    encoder: DocumentEncoder, ids: list[int], mask: list[bool]
) -> tuple[np.ndarray, np.ndarray]:
    """A document's ids (int64) and mask (bool) with the encoder's BOS/EOS added where absent
    (module docstring: BOS untrained, EOS trained as the token before it); no token stays
    none."""
    if ids:
        if encoder.bos is not None and ids[0] != encoder.bos:
            ids.insert(0, encoder.bos)
            mask.insert(0, False)
        if encoder.eos is not None and ids[-1] != encoder.eos:
            ids.append(encoder.eos)
            mask.append(mask[-1])
    return np.array(ids, dtype=np.int64), np.array(mask, dtype=bool)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
