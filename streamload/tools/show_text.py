"""The terminal view of ``streamload show``: a report (:mod:`streamload.tools.show_report`)
as readable lines.

Each sample is a header (its sample index, rank and row, source), its masked label
positions as inclusive ranges, then one line per document with where it comes from and one
with its content: the decoded text (quoted, escapes visible) or the token ids. A document
longer than ``max_tokens`` shows its first and last tokens around a count of those left out.

Where the data's loss mask is in play (a label is -100 other than at a document boundary or
over the padding: an SFT prompt), the tokens that are not trained as targets are bracketed
``[- … -]`` (plain text, so it survives a pipe or a log): token ``t`` is trained when
``labels[t - 1]`` is not -100, the row's first token never.

Example::

    sample 12 · rank 1 row 0 · source web #17 (epoch 0) at token 1234
      masked labels (2 of 16): 4, 15
      [0, 5) doc 12 of part-0.npy @ 120, began 3 tokens before · id=d12 src=a.json.gz
          "lo world<|endoftext|>"

and a packed conversation whose prompt is not trained::

      masked labels (9 of 16): 0-5, 10-12
      trained labels 7 of 16; [- -] marks the tokens not trained (prompt, boundaries)
      [0, 10) doc 3 of chat.jsonl @ 40
          [-"<|user|>Hi?<|end|>"-] "Hello!<|end|>"
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any

from streamload.tools.documents import short_value
from streamload.tools.show_report import Decoder

__all__ = ["UNTRAINED", "format_step", "inclusive_ranges", "untrained_tokens"]

UNTRAINED = ("[-", "-]")
"""What brackets a run of tokens that are not trained as targets (plain ASCII)."""
_IGNORE = -100


def inclusive_ranges(ranges: Sequence[Sequence[int]]) -> str:
    """``[[4, 5], [13, 16]]`` → ``"4, 13-15"``."""
    parts = [f"{a}" if b - a == 1 else f"{a}-{b - 1}" for a, b in ranges]
    return ", ".join(parts) or "none"


def format_step(report: dict[str, Any], decoder: Decoder | None, max_tokens: int) -> str:
    """The report as lines for a terminal (module docstring)."""
    root = _common_folder(list(report["shards"]))
    lines = _header(report, root)
    for sample in report["samples"]:
        lines += ["", *_sample(sample, report, decoder, max_tokens, root)]
    lines += _shards(report, root)
    return "\n".join(lines)


def _header(report: dict[str, Any], root: str) -> list[str]:
    who = "all ranks" if report["rank"] is None else f"rank {report['rank']}"
    masks = "masks on" if report["masks"] else "masks off"
    accum = report.get("grad_accum_steps", 1)
    micro = f"{accum} micro-batches x " if accum > 1 else ""
    unit = report.get("unit", "samples")
    lines = [
        f"step {report['step']} of pass {report['pass']}: global batch "
        f"{report['global_batch_size']} = {micro}{_count(report['world_size'], 'rank')} x "
        f"{report['batch_size']} {unit} ({who}); seq_len {report['seq_len']}, "
        f"{report['mode']} mode, {masks}",
        "sources: " + ", ".join(f"{i} {n}" for i, n in enumerate(report["sources"])),
    ]
    if root:
        lines.append(f"shards under {root}/")
    return lines


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _sample(
    sample: dict[str, Any],
    report: dict[str, Any],
    decoder: Decoder | None,
    max_tokens: int,
    root: str,
) -> list[str]:
    where = f"source {sample['source']} #{sample['source_sample']} (epoch {sample['source_epoch']})"
    if sample["source_offset"] is not None:
        where += f" at token {sample['source_offset']}"
    micro = (
        f"micro-batch {sample['micro_batch']} · " if report.get("grad_accum_steps", 1) > 1 else ""
    )
    head = (
        f"sample {sample['sample_index']} · {micro}rank {sample['rank']} row {sample['row']} · "
        f"{where}"
    )
    if sample["data_tokens"] is not None:
        head += f" · {sample['data_tokens']} of {report['seq_len'] + 1} tokens are data"
    if sample["skipped"]:
        head += " · SKIPPED (unreadable; every label -100)"
    masked = sum(b - a for a, b in sample["masked"])
    lines = [head, f"  masked labels ({masked} of {report['seq_len']}): "
             f"{inclusive_ranges(sample['masked'])}"]  # fmt: skip
    untrained = untrained_tokens(sample)
    if untrained is not None:
        lines.append(
            f"  trained labels {report['seq_len'] - masked} of {report['seq_len']}; "
            f"{' '.join(UNTRAINED)} marks the tokens not trained (prompt, boundaries)"
        )
    if sample["documents_from"] is None:
        lines.append("  documents: unknown (no document index and no eos_token_id)")
    else:
        lines.append(f"  documents (from {sample['documents_from']}):")
    ids = sample["input_ids"]
    for doc in sample["documents"]:
        lines.append(f"  [{doc['start']}, {doc['end']}) " + _provenance(doc, root))
        if doc["kind"] != "padding":  # its tokens are all pad_token_id
            span = slice(doc["start"], doc["end"])
            flags = None if untrained is None else untrained[span]
            lines.append("      " + _content(ids[span], decoder, max_tokens, flags))
    return lines


def untrained_tokens(sample: dict[str, Any]) -> list[bool] | None:
    """Whether each input token of a report's sample is *not* trained as a target
    (``labels[t - 1]`` is -100; token 0 never is); ``None`` when only document boundaries
    and padding are masked (no loss mask in play: nothing worth marking)."""
    labels = sample["labels"]
    if sample["skipped"]:
        return None
    expected: set[int] = set()  # label positions boundaries and padding mask anyway
    for doc in sample["documents"]:
        if doc["kind"] == "padding":
            expected.update(range(max(doc["start"] - 1, 0), len(labels)))
        elif doc["start"] > 0:
            expected.add(doc["start"] - 1)
    if all(label != _IGNORE or t in expected for t, label in enumerate(labels)):
        return None
    return [t == 0 or labels[t - 1] == _IGNORE for t in range(len(labels))]


def _provenance(doc: dict[str, Any], root: str) -> str:
    if doc["kind"] == "padding":
        return "padding (pad_token_id)"
    if doc["shard"] is None:
        return "document" if doc["kind"] == "document" else "whole sample"
    shard = _short(doc["shard"], root)
    what = "" if doc["document"] is None else f"doc {doc['document']} of "
    text = f"{what}{shard} @ {doc['shard_offset']}"
    if doc["continued"]:
        began = doc["document_start"]
        text += ", continued" if began is None else f", began {doc['shard_offset'] - began} " \
            "tokens before"  # fmt: skip
    metadata = doc["metadata"] or {}
    fields = " ".join(f"{k}={short_value(v)}" for k, v in metadata.items() if v not in (None, ""))
    return f"{text} · {fields}" if fields else text


def _content(
    ids: Sequence[int], decoder: Decoder | None, max_tokens: int, untrained: list[bool] | None
) -> str:
    flags = untrained or [False] * len(ids)
    if len(ids) <= max_tokens:
        return _marked(ids, flags, decoder)
    keep_head = (max_tokens + 1) // 2
    keep_tail = max_tokens // 2
    cut = len(ids) - keep_tail
    tail = _marked(ids[cut:], flags[cut:], decoder) if keep_tail else ""
    middle = f"… {len(ids) - keep_head - keep_tail} more tokens …"
    head = _marked(ids[:keep_head], flags[:keep_head], decoder)
    return " ".join(p for p in (head, middle, tail) if p)


def _marked(ids: Sequence[int], untrained: Sequence[bool], decoder: Decoder | None) -> str:
    """The tokens rendered run by run, runs not trained in :data:`UNTRAINED` brackets."""
    parts, at = [], 0
    for flag, run in itertools.groupby(untrained):
        size = len(list(run))
        text = _render(ids[at : at + size], decoder)
        parts.append(f"{UNTRAINED[0]}{text}{UNTRAINED[1]}" if flag else text)
        at += size
    return " ".join(parts)


def _render(ids: Sequence[int], decoder: Decoder | None) -> str:
    if not ids:
        return ""
    if decoder is None:
        return " ".join(str(i) for i in ids)
    return json.dumps(decoder(ids), ensure_ascii=False)


def _shards(report: dict[str, Any], root: str) -> list[str]:
    lines = []
    for path, info in report["shards"].items():
        name = _short(path, root)
        notes = [info["format"]]
        if info["tokenizer"]:
            notes.append(f"tokenizer {info['tokenizer']}")
        if info.get("text_input"):  # a text source's cache part
            notes.append(f"tokenized from {info['text_input']}")
        if info["format"] == "datatrove":
            notes.append("no per-document metadata in this format")
        lines.append(f"  {name} ({', '.join(notes)})")
    return ["", "shards:", *lines] if lines else []


def _common_folder(paths: Sequence[str]) -> str:
    """The folder all ``paths`` lie under (URLs too: split on ``/``, not ``os.path``)."""
    if not paths:
        return ""
    folders = [p.split("/")[:-1] for p in paths]
    same = itertools.takewhile(lambda parts: len(set(parts)) == 1, zip(*folders, strict=False))
    return "/".join(parts[0] for parts in same)


def _short(path: str, root: str) -> str:
    return path[len(root) + 1 :] if root and path.startswith(root + "/") else path
