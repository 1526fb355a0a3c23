"""Corpora for start-up at scale: many tiny shards, or one token stream of many documents.

Two shapes, each in the formats streamload reads, each folder holding its shards only (a
file written beside them would change the listing, hence the catalog):

* **many shards** (:func:`ensure_shards`): ``count`` shards of :data:`SHARD_TOKENS` ``uint16``
  tokens, :data:`DOCS_PER_SHARD` documents of :data:`DOC_TOKENS` tokens each ending in EOS (id
  0); every shard holds the same bytes, so 10⁵ of them cost ~0.8 GB of disk per format and a
  few seconds to write. Megatron: ``shard_i.bin`` + ``.idx``; NumPy: ``shard_i.npy``; raw:
  ``shard_i.bin`` (headerless, ``dtype = "uint16"`` in the config); Dolma: ``part-i.npy``
  (headerless) + ``part-i.csv.gz``.
* **many documents** (:func:`ensure_documents`): ``count`` documents of 16-240 tokens (mean
  128, seeded), in shards of at most :data:`DOCS_PER_BIG_SHARD` documents. The token files are
  sparse (all zeros, no disk blocks): the boundaries come from the format's document index,
  so only Megatron (``.idx``) and Dolma (``.csv.gz``) hold this shape.

Files are written to a hidden temporary name and renamed; a folder is complete when its
``.complete`` marker (in the parent folder, not among the shards) exists.
"""

from __future__ import annotations

import gzip
import io
import math
import os
import struct
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

__all__ = [
    "DOCS_PER_BIG_SHARD",
    "DOCS_PER_SHARD",
    "DOC_FORMATS",
    "DOC_TOKENS",
    "EOS",
    "PAD",
    "SHARD_FORMATS",
    "SHARD_TOKENS",
    "VOCAB",
    "ensure_documents",
    "ensure_shards",
    "source_entry",
]

SHARD_TOKENS = 4096
DOC_TOKENS = 512
DOCS_PER_SHARD = SHARD_TOKENS // DOC_TOKENS
DOCS_PER_BIG_SHARD = 1_000_000
EOS = 0
PAD = 1
VOCAB = 65_536
SHARD_FORMATS = ("megatron", "numpy", "raw", "dolma")
DOC_FORMATS = ("megatron", "dolma")
_MEGATRON_MAGIC = b"MMIDIDX\x00\x00"
_UINT16_CODE = 8


def _write_bytes(body: bytes, path: Path) -> None:
    path.write_bytes(body)


def _write_sparse(size: int, path: Path) -> None:
    with open(path, "wb") as fh:
        fh.truncate(size)


def _atomic(path: Path, write: Callable[[Path], None]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write(tmp)
    os.replace(tmp, path)


def _megatron_index(lengths: np.ndarray, itemsize: int) -> bytes:
    """An ``.idx`` as megatron-core writes it (one sequence per document)."""
    lengths = np.asarray(lengths, dtype="<i4")
    pointers = np.zeros(lengths.size, dtype="<i8")
    np.cumsum(lengths[:-1], dtype=np.int64, out=pointers[1:])
    pointers *= itemsize
    header = struct.pack("<QBQQ", 1, _UINT16_CODE, lengths.size, lengths.size + 1)
    docs = np.arange(lengths.size + 1, dtype="<i8")
    return b"".join(
        [_MEGATRON_MAGIC, header, lengths.tobytes(), pointers.tobytes(), docs.tobytes()]
    )


def _dolma_rows(lengths: np.ndarray, first_id: int) -> bytes:
    """``start,end,id,src,loc`` rows (CRLF), as ``dolma tokens`` writes them."""
    ends = np.cumsum(lengths, dtype=np.int64)
    starts = ends - lengths
    rows = [
        f"{s},{e},doc-{first_id + i},bench.jsonl.gz,{first_id + i + 1}\r\n"
        for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True))
    ]
    return "".join(rows).encode()


def _template_tokens() -> np.ndarray:
    tokens = np.random.default_rng(0).integers(2, VOCAB, SHARD_TOKENS, dtype=np.uint16)
    tokens[DOC_TOKENS - 1 :: DOC_TOKENS] = EOS
    return tokens


def _shard_files(fmt: str, index: int, tokens: np.ndarray) -> dict[str, bytes]:
    """File name → bytes of many-shards shard ``index`` (the same ``tokens`` in every shard)."""
    lengths = np.full(DOCS_PER_SHARD, DOC_TOKENS)
    if fmt == "megatron":
        body = tokens.tobytes()
        return {
            f"shard_{index:06d}.bin": body,
            f"shard_{index:06d}.idx": _megatron_index(lengths, 2),
        }
    if fmt == "numpy":
        header = np.lib.format.header_data_from_array_1_0(tokens)
        buf = io.BytesIO()
        np.lib.format.write_array_header_1_0(buf, header)
        return {f"shard_{index:06d}.npy": buf.getvalue() + tokens.tobytes()}
    if fmt == "raw":
        return {f"shard_{index:06d}.bin": tokens.tobytes()}
    if fmt == "dolma":
        rows = gzip.compress(_dolma_rows(lengths, index * DOCS_PER_SHARD), compresslevel=1)
        return {f"part-{index:06d}.npy": tokens.tobytes(), f"part-{index:06d}.csv.gz": rows}
    raise ValueError(f"format {fmt!r}: expected one of {SHARD_FORMATS}")


def ensure_shards(data_dir: str | os.PathLike[str], fmt: str, count: int) -> Path:
    """The folder of a many-shards corpus of ``count`` shards in ``fmt`` (written if missing)."""
    folder = Path(data_dir) / f"shards-{fmt}-{count}"
    marker = folder.with_name(folder.name + ".complete")
    if marker.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    tokens = _template_tokens()
    for i in range(count):
        for name, body in _shard_files(fmt, i, tokens).items():
            if not (folder / name).exists():
                _atomic(folder / name, partial(_write_bytes, body))
    marker.touch()
    print(f"wrote {count} {fmt} shards in {time.perf_counter() - began:.1f} s", file=sys.stderr)
    return folder


def _document_lengths(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(16, 241, count).astype(np.int64)


def ensure_documents(data_dir: str | os.PathLike[str], fmt: str, count: int) -> Path:
    """The folder of a many-documents corpus of ``count`` documents (sparse token files)."""
    if fmt not in DOC_FORMATS:
        raise ValueError(f"format {fmt!r}: many-documents corpora exist in {DOC_FORMATS}")
    folder = Path(data_dir) / f"docs-{fmt}-{count}"
    marker = folder.with_name(folder.name + ".complete")
    if marker.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    lengths = _document_lengths(count)
    shards = math.ceil(count / DOCS_PER_BIG_SHARD)
    for i in range(shards):
        part = lengths[i * DOCS_PER_BIG_SHARD : (i + 1) * DOCS_PER_BIG_SHARD]
        sparse = partial(_write_sparse, int(part.sum()) * 2)

        if fmt == "megatron":
            _atomic(folder / f"shard_{i:04d}.bin", sparse)
            index = _megatron_index(part, 2)
            _atomic(folder / f"shard_{i:04d}.idx", partial(_write_bytes, index))
        else:
            rows = gzip.compress(_dolma_rows(part, i * DOCS_PER_BIG_SHARD), compresslevel=1)
            _atomic(folder / f"part-{i:04d}.npy", sparse)
            _atomic(folder / f"part-{i:04d}.csv.gz", partial(_write_bytes, rows))
    marker.touch()
    print(f"wrote {count} {fmt} documents in {time.perf_counter() - began:.1f} s", file=sys.stderr)
    return folder


def source_entry(fmt: str, folder: Path) -> dict[str, object]:
    """The ``[[sources]]`` entry of a corpus folder (its format and dtype named)."""
    entry: dict[str, object] = {"name": "bench", "path": str(folder), "format": fmt}
    if fmt in ("raw", "dolma"):
        entry["dtype"] = "uint16"
    return entry
