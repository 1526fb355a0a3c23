"""Write this folder's datatrove fixture with datatrove's own ``DocumentTokenizer``.

Run from the repository root, with datatrove installed aside (never in the project venv)::

    python3 -m venv /tmp/dtvenv && /tmp/dtvenv/bin/pip install datatrove==0.10.1 tokenizers
    /tmp/dtvenv/bin/python tests/data/datatrove_loss/make.py

It tokenizes :data:`DOCUMENTS` with ``tok300.json`` (the shared test vocabulary: WordLevel,
whitespace split, ``<|endoftext|>`` = 0, ``w{i}`` = i + 2), unshuffled, appending EOS, with
``save_loss_metadata=True``: datatrove zeroes the loss of the tokens that each document's
``no_loss_ranges`` (``[start, end)`` character ranges of the text) cover, mapping both ends
with ``Encoding.char_to_token``; a range whose end maps to no token (the end of the text, or
whitespace) zeroes everything from its start and **crops** the document there (the EOS goes
too). Then it prints the tokens and loss bytes it wrote (``README.md`` quotes them).
Not a test module: pytest collects only ``test_*.py``.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAME = "loss"
"""``save_filename``: the output is ``loss_00000_unshuffled.ds`` (rank 0, unshuffled)."""
DOCUMENTS: list[tuple[str, list[tuple[int, int]] | None]] = [
    ("w5 w6 w7 w8 w9", None),  # no metadata: every token trained
    ("w10 w11 w12 w13 w14", [(4, 12)]),  # a range in the middle: w11 w12
    ("w20 w21 w22 w23", [(0, 8)]),  # a prompt at the start: w20 w21
    ("w30 w31 w32 w33", [(8, 15)]),  # a range reaching the end: cropped after w31
    ("w40 w41 w42 w43 w44 w45", [(0, 4), (8, 12)]),  # two ranges: w40 and w42
]
"""Texts and their ``no_loss_ranges`` (character offsets; ``end`` is the first character
after the range, here the first character of the next trained word)."""
FILES = (".ds", ".ds.index", ".ds.metadata", ".ds.loss")


def main() -> None:
    import numpy as np
    from datatrove.data import Document
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.tokens import DocumentTokenizer

    docs = [
        Document(text=text, id=f"d{i}", metadata={} if r is None else {"no_loss_ranges": r})
        for i, (text, r) in enumerate(DOCUMENTS)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(HERE / "tok300.json", Path(tmp) / "tok300.json")
        os.chdir(tmp)  # the metadata records the tokenizer as named: "tok300.json"
        step = DocumentTokenizer(
            output_folder="out",
            tokenizer_name_or_path="tok300.json",
            save_filename=NAME,
            eos_token="<|endoftext|>",
            save_loss_metadata=True,
            shuffle_documents=False,
        )
        LocalPipelineExecutor([docs, step], logging_dir="logs", skip_completed=False).run()
        for suffix in FILES:
            shutil.copy(Path("out") / f"{NAME}_00000_unshuffled{suffix}", HERE)
    base = HERE / f"{NAME}_00000_unshuffled.ds"
    tokens = np.fromfile(base, dtype="<u2")
    ends = np.fromfile(f"{base}.index", dtype="<u8")
    loss = np.fromfile(f"{base}.loss", dtype="u1")
    bounds = [0, *ends.tolist()]
    for s, e in itertools.pairwise(bounds):
        print(tokens[s:e].tolist(), loss[s:e].tolist())
    print("metadata:", repr((HERE / f"{NAME}_00000_unshuffled.ds.metadata").read_text()))


if __name__ == "__main__":
    main()
