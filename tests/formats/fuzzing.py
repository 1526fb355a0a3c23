"""A small seeded fuzzer for on-disk formats: mutate one file of a valid fixture, read
everything back, classify the outcome.

Each case copies the fixture's files into a fresh folder, mutates one of them with a
``random.Random(seed)`` draw (truncate, flip bytes, a random integer in a header field,
garbage, inserted bytes, text edits such as a non-ASCII digit, JSON field values, or the
same on the decompressed text of a ``.gz``), then describes the folder as the loader does,
opens every shard and reads all its tokens, document bounds and companion data.

Outcomes: ``error`` (a :class:`~streamload.errors.StreamloadError`), ``same`` (equal to the
read of the unmutated fixture) or ``different`` (the file stayed valid, e.g. a flipped token
byte; then every read must stay within the file: token counts, bounds from 0 to the token
count, data inside the file). Anything else (another exception, a case running past
``CASE_SECONDS``) is a failure reported with the seed that reproduces it.
"""

from __future__ import annotations

import gzip
import json
import random
import signal
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from streamload.catalog.sources import describe_source
from streamload.config import SourceConfig
from streamload.errors import StreamloadError
from streamload.formats import open_shard
from streamload.formats.loss_mask import mask_shard

__all__ = [
    "CASE_SECONDS",
    "Target",
    "mutate",
    "read_everything",
    "run_cases",
    "run_integer_cases",
]

CASE_SECONDS = 10.0
"""A case running longer is a hang."""

_ODD_TEXT = [
    "١", "٢٥", "²", "５", "-", "+", " ", "_", "x", "\n", '"', ",", "|", "\r\n", "", "0",
    "9" * 25, "\x00", "\ufeff", "1e3", "NaN", "-1",
]  # fmt: skip
_ODD_JSON: list[Any] = [
    None, True, False, -1, 0, 1, 2, 255, 256, 2**31, 2**63, 2**64, 2**64 + 3, 1.5,
    float("nan"), "x", "", "../x", [], {}, [1, -1], [2**70], ["1"], "uint8",
]  # fmt: skip


@dataclass(frozen=True)
class Target:
    """A file of a fixture to mutate.

    Attributes:
        name: File name in the fixture folder.
        fields: ``(offset, width)`` of little-endian integer header/index fields.
        hot: Byte range holding header or index (most byte edits land there).
        kind: ``"bytes"``, ``"text"`` (also text edits), ``"json"`` (also field values),
            ``"gzip"`` (edits of the decompressed text, recompressed, too).
        label: Name in reports (default: the file name).
    """

    name: str
    fields: tuple[tuple[int, int], ...] = ()
    hot: tuple[int, int] | None = None
    kind: str = "bytes"
    label: str = ""


def _position(data: bytes, target: Target, rng: random.Random) -> int:
    if target.hot is not None and rng.random() < 0.8:
        lo, hi = target.hot
        return rng.randrange(lo, max(lo + 1, min(hi, len(data))))
    return rng.randrange(max(1, len(data)))


def _field(data: bytes, target: Target, rng: random.Random) -> bytes:
    offset, width = rng.choice(target.fields)
    if offset + width > len(data):
        return data
    current = int.from_bytes(data[offset : offset + width], "little")
    top = (1 << (8 * width)) - 1
    value = rng.choice([0, 1, 2, 3, 4, 7, 8, 255, top, top >> 1, (top >> 1) + 1, current + 1,
                        max(current - 1, 0), current * 2, rng.getrandbits(8 * width)])  # fmt: skip
    raw = (value & top).to_bytes(width, "little")
    return data[:offset] + raw + data[offset + width :]


def _text_edit(data: bytes, rng: random.Random) -> bytes:
    odd = rng.choice(_ODD_TEXT).encode("utf-8")
    digits = [i for i, b in enumerate(data) if 48 <= b <= 57]
    choice = rng.choice([0, 0, 0, 1, 2, 3])
    if choice == 0 and digits:  # a digit replaced by something int() may or may not take
        i = rng.choice(digits)
        return data[:i] + odd + data[i + 1 :]
    lines = data.split(b"\n")
    if choice == 1 and len(lines) > 1:  # a line dropped or doubled
        i = rng.randrange(len(lines))
        lines[i : i + 1] = [] if rng.random() < 0.5 else [lines[i], lines[i]]
        return b"\n".join(lines)
    i = rng.randrange(len(data) + 1)
    j = min(len(data), i + rng.randrange(1, 6))
    return data[:i] + (odd if choice == 2 else b"") + data[j:]


def _json_leaf(record: Any, rng: random.Random) -> tuple[Any, Any]:
    """A random (container, key) inside ``record``, descending into nested objects and lists:
    index fields such as MDS's ``shards[i].column_sizes[j]`` live two or three levels down."""
    parent: Any = record
    key: Any = rng.choice(sorted(record))
    while rng.random() < 0.75:
        child = parent[key]
        if isinstance(child, dict) and child:
            parent, key = child, rng.choice(sorted(child))
        elif isinstance(child, list) and child:
            parent, key = child, rng.randrange(len(child))
        else:
            break
    return parent, key


def _json_edit(data: bytes, rng: random.Random) -> bytes:
    record = json.loads(data)
    if not isinstance(record, dict) or not record:
        return data
    if rng.random() < 0.5:  # a nested value, e.g. column_sizes[1] = 2**64 + 3 (issue 36)
        parent, leaf = _json_leaf(record, rng)
        parent[leaf] = rng.choice(_ODD_JSON)
        return json.dumps(record).encode()
    key = rng.choice(sorted(record))
    if rng.random() < 0.2:
        del record[key]
    else:
        record[key] = rng.choice(_ODD_JSON)
    return json.dumps(record).encode()


def _byte_edit(data: bytes, target: Target, rng: random.Random) -> tuple[str, bytes]:
    kinds = ["truncate", "flip", "garbage", "insert"] + ["field"] * (3 if target.fields else 0)
    kind = rng.choice(kinds)
    if kind == "truncate":
        return kind, data[: rng.randrange(len(data))] if data else data
    if kind == "field":
        return kind, _field(data, target, rng)
    if kind == "flip":
        out = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            if out:
                out[_position(data, target, rng)] ^= rng.randrange(1, 256)
        return kind, bytes(out)
    noise = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 40)))
    if kind == "garbage":
        return kind, noise if rng.random() < 0.5 else data[: len(data) // 2] + noise
    i = _position(data, target, rng)
    return kind, data[:i] + noise + data[i:]


def mutate(data: bytes, target: Target, rng: random.Random) -> tuple[str, bytes]:
    """A mutation of ``data`` (the file ``target``): its name and the new bytes."""
    if target.kind == "gzip" and rng.random() < 0.5:
        text = gzip.decompress(data)
        name, edited = ("text", _text_edit(text, rng)) if rng.random() < 0.8 else (
            _byte_edit(text, Target(target.name), rng))  # fmt: skip
        return f"gzip-{name}", gzip.compress(edited, mtime=0)
    if target.kind == "json" and rng.random() < 0.4:
        return "json-field", _json_edit(data, rng)
    if target.kind in ("text", "json") and rng.random() < 0.7:
        return "text", _text_edit(data, rng)
    return _byte_edit(data, target, rng)


def read_everything(folder: Path, kw: dict[str, Any], pattern: str = "") -> list[tuple[Any, ...]]:
    """Describe ``folder`` (its files matching ``pattern``, default all token files) as the
    loader does, open every shard, read all it holds, and check each read stays within its
    file."""
    path = str(folder / pattern) if pattern else str(folder)
    catalog = describe_source(SourceConfig(name="fuzz", path=path, **kw))
    out = []
    for info in catalog.shards:
        shard = open_shard(info)
        tokens = np.asarray(shard.tokens(0, info.num_tokens))
        assert tokens.size == info.num_tokens, (tokens.size, info.num_tokens)
        if info.format != "jsonl":  # jsonl tokens are encoded, not stored
            end = info.offset + info.num_tokens * np.dtype(info.dtype).itemsize
            assert info.offset >= 0 and end <= info.size == Path(info.path).stat().st_size
        bounds = shard.document_bounds()
        if bounds is not None:
            bounds = np.asarray(bounds)
            assert bounds.size >= 1 and bounds[0] == 0 and bounds[-1] == info.num_tokens
            assert bool(np.all(np.diff(bounds) >= 0))
        listed = None if bounds is None else bounds.tolist()
        row = (info.relpath, info.format, np.dtype(info.dtype).str, tokens.tolist(), listed)
        out.append((*row, _extras(shard, bounds)))
    return out


def _extras(shard: Any, bounds: np.ndarray | None) -> list[Any]:
    """Companion data a format serves beyond tokens and documents."""
    extras: list[Any] = []
    if hasattr(shard, "document_metadata") and bounds is not None:
        extras += [shard.document_metadata(i) for i in range(len(bounds) - 1)]
    if shard.info.loss_mask is not None:
        mask = open_shard(mask_shard(shard.info)).tokens(0, shard.info.num_tokens)
        extras.append(np.asarray(mask).tolist())
    if hasattr(shard, "sequence_bounds"):
        extras.append(np.asarray(shard.sequence_bounds()).tolist())
    return extras


class Hang(BaseException):
    """A case ran past ``CASE_SECONDS`` (a BaseException: no ``except Exception`` hides it)."""


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    if not hasattr(signal, "setitimer"):  # pragma: no cover - not on this platform
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise Hang(f"ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Report:
    """Outcomes of a run: counts per (target, outcome) and the failures."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, dict[str, int]]:
        """``{target: {outcome: count}}``."""
        out: dict[str, dict[str, int]] = {}
        for (target, outcome), count in sorted(self.counts.items()):
            out.setdefault(target, {})[outcome] = count
        return out


def run_cases(
    fixture: dict[str, bytes],
    targets: dict[Target, int],
    root: Path,
    read: Callable[[Path], Any],
    seed: int,
) -> Report:
    """Run ``targets[t]`` seeded cases per target file of ``fixture`` (name → bytes).

    ``read(folder)`` reads a folder (:func:`read_everything` with the format's options).
    """
    base = root / "fixture"
    _write(base, fixture)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = read(base)
    report = Report()
    for number, (target, cases) in enumerate(targets.items()):
        label = target.label or target.name
        for case in range(cases):
            rng = random.Random(f"{seed}/{label}/{case}")
            kind, data = mutate(fixture[target.name], target, rng)
            folder = root / f"{number}-{case}"
            _write(folder, {**fixture, target.name: data})
            outcome = _run_one(folder, read, expected, report, f"{label} case {case} {kind}")
            report.counts[(label, outcome)] += 1
    return report


OUT_OF_RANGE = (-1, 2**63, 2**64 + 3)
"""Values every integer field of a JSON index is set to by :func:`run_integer_cases`."""


def _integer_paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(node, dict):
        return [p for k in sorted(node) for p in _integer_paths(node[k], (*path, k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _integer_paths(v, (*path, i))]
    return [path] if node is None or type(node) is int else []  # null: an unset size


def run_integer_cases(
    fixture: dict[str, bytes], name: str, root: Path, read: Callable[[Path], Any]
) -> Report:
    """Set every integer (or null) anywhere in the JSON file ``name`` of ``fixture`` to each of
    :data:`OUT_OF_RANGE` in turn (an exhaustive case list, not a seeded sample: a
    ``column_sizes`` entry of 2**64 + 3 once raised ``OverflowError``, issue 36)."""
    base = root / "fixture"
    _write(base, fixture)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = read(base)
    record = json.loads(fixture[name])
    report = Report()
    for number, path in enumerate(_integer_paths(record)):
        for value in OUT_OF_RANGE:
            edited = json.loads(fixture[name])
            node = edited
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
            folder = root / f"int-{number}-{value}"
            _write(folder, {**fixture, name: json.dumps(edited).encode()})
            where = f"{name} {'.'.join(map(str, path))} = {value}"
            outcome = _run_one(folder, read, expected, report, where)
            report.counts[(name, outcome)] += 1
    return report


def _run_one(folder: Path, read: Callable, expected: Any, report: Report, what: str) -> str:
    try:
        with _deadline(CASE_SECONDS), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = read(folder)
    except StreamloadError:
        return "error"
    except (Exception, Hang):
        report.failures.append(f"{what} ({folder}):\n{traceback.format_exc()}")
        return "failure"
    return "same" if got == expected else "different"


def _write(folder: Path, files: dict[str, bytes]) -> None:
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
