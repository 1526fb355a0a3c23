"""What a reader of documents gives: one document, and the counts of what it read.

Kept apart from :mod:`streamload.tokenize.inputs` (which re-exports both) so the writers and
the encoders can name a document without the readers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streamload.tokenize.loss_spans import Spans

__all__ = ["InputDocument", "ReadCounts"]


@dataclass(frozen=True)
class InputDocument:
    """One document read from a line or row: stripped text, id, source path, 1-based line or
    row (``loc``), and the trained character spans of the text (``None`` without
    ``loss_spans_field``; for a conversation, ``None`` means every token)."""

    text: str
    id: str
    src: str
    loc: int
    trained: Spans | None = None


@dataclass
class ReadCounts:
    """What a reader saw: lines (or rows), documents given out, empty texts and bad lines
    (or rows) skipped."""

    lines: int = 0
    documents: int = 0
    empty: int = 0
    bad: int = 0
    bad_examples: list[str] = field(default_factory=list)

    def add(self, other: ReadCounts) -> None:
        """Add another reader's counts (keeps the first few bad-line examples)."""
        self.lines += other.lines
        self.documents += other.documents
        self.empty += other.empty
        self.bad += other.bad
        self.bad_examples.extend(other.bad_examples[: 5 - len(self.bad_examples)])
