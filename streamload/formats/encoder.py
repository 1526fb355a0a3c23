"""Text → token ids with the rules of ``dolma tokens`` 1.2.1 (FORMATS §4.2).

* The caller strips the text and skips empty documents (they get no row and no tokens).
* Texts are encoded in batches by the ``tokenizers`` library (``encode_batch``, Rust threads)
  **without** the tokenizer's own special tokens.
* BOS is prepended when set and the first token is not already BOS; EOS is appended when set
  and the last token is not already EOS. A text that encodes to no token stays empty.
* ``segment_before_tokenization`` cuts each text into paragraphs (a run of newlines starts a
  paragraph and stays with it), encodes them as one batch and joins the ids; when the
  tokenizer adds a prefix space, every paragraph but the first is encoded with a leading
  space whose first token is then dropped, so the ids do not depend on the cut.

The ``tokenizers`` library is an optional dependency (the ``tokenizers`` extra); it is imported
when an encoder is built, never by ``import streamload``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np

from streamload.errors import ConfigError

__all__ = ["DocumentEncoder", "load_tokenizer"]

_PARAGRAPH = re.compile(r"(^\n*|\n+)[^\n]*")
"""A paragraph: the leading newlines (all of them for the first) and the line after them."""


def load_tokenizer(path: str) -> Any:
    """A ``tokenizers.Tokenizer`` from a ``tokenizer.json`` path.

    Raises:
        ConfigError: the library is missing, or the file is missing or not a tokenizer.
    """
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:  # pragma: no cover - the dev venv has it
        raise ConfigError(
            "encoding or decoding text needs the 'tokenizers' library: "
            "pip install 'streamload[tokenizers]'"
        ) from exc
    if not os.path.isfile(path):
        raise ConfigError(f"tokenizer {path!r}: no such file; give the path of a tokenizer.json")
    try:
        return Tokenizer.from_file(path)
    except Exception as exc:
        raise ConfigError(f"tokenizer {path}: not a HuggingFace tokenizer.json ({exc})") from exc


def _has_prefix_space(config: dict[str, Any]) -> bool:
    """Whether the tokenizer adds a space before a sequence (pre-tokenizer or normalizer)."""
    pre = config.get("pre_tokenizer") or {}
    pres = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    if any(p.get("add_prefix_space", False) for p in pres):
        return True
    norm = config.get("normalizer") or {}
    norms = norm.get("normalizers", []) if norm.get("type") == "Sequence" else [norm]
    return any(n.get("type") == "Prepend" for n in norms)


class DocumentEncoder:
    """Encode stripped, non-empty texts into token arrays with BOS/EOS as dolma adds them.

    Args:
        tokenizer_path: ``tokenizer.json``.
        bos_token_id: BOS id or ``None``.
        eos_token_id: EOS id or ``None``.
        segment_before_tokenization: Encode paragraph by paragraph (module docstring).

    Example:
        >>> enc = DocumentEncoder("tok.json", None, 0)  # doctest: +SKIP
        >>> enc.encode(["hello world"])  # doctest: +SKIP
        [array([17, 42, 0])]
    """

    def __init__(
        self,
        tokenizer_path: str,
        bos_token_id: int | None,
        eos_token_id: int | None,
        segment_before_tokenization: bool = False,
    ) -> None:
        self.tokenizer = load_tokenizer(tokenizer_path)
        self.bos = bos_token_id
        self.eos = eos_token_id
        self.segment = segment_before_tokenization
        self.vocab_size = int(self.tokenizer.get_vocab_size(with_added_tokens=True))
        self._prefix = segment_before_tokenization and _has_prefix_space(
            json.loads(self.tokenizer.to_str())
        )

    def _ids(self, texts: Sequence[str]) -> list[list[int]]:
        encodings = self.tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
        return [e.ids for e in encodings]

    def _segmented_ids(self, texts: Sequence[str]) -> list[list[int]]:
        pieces: list[str] = []
        spans = []
        for text in texts:
            start = len(pieces)
            for i, match in enumerate(_PARAGRAPH.finditer(text)):
                pieces.append((" " if self._prefix and i > 0 else "") + match.group())
            spans.append((start, len(pieces)))
        ids = self._ids(pieces)
        return [
            list(
                chain.from_iterable(
                    ids[p][1:] if self._prefix and p > start else ids[p] for p in range(start, stop)
                )
            )
            for start, stop in spans
        ]

    def encode(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids (int64) of each text, BOS/EOS added where absent."""
        batch = self._segmented_ids(texts) if self.segment else self._ids(texts)
        out = []
        bos, eos = self.bos, self.eos
        for ids in batch:
            if ids:
                if bos is not None and ids[0] != bos:
                    ids.insert(0, bos)
                if eos is not None and ids[-1] != eos:
                    ids.append(eos)
            out.append(np.array(ids, dtype=np.int64))
        return out
