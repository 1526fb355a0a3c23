"""A transient server error on any read of any format is retried, never called corruption.

Each format's shards are written locally, uploaded to moto's S3 server and read through the
fault-injecting proxy (``tests/servers/http.py``), which answers one chosen GET of one shard's
files with a 500: its 1st, 2nd or 3rd (a header, an index, a footer, the tokens, depending on
the format). The batches must equal the local read exactly, and the error must have been
retried (issue 36: pyarrow's footer read turned the 500 into ``FormatError: not a readable
Parquet file ... it is truncated or corrupt``, inside the retry loop, so it was not retried and
``on_error = "skip"`` did not apply). A shard that answers 500 to every GET is left out or
skipped under ``on_error = "skip"`` once the retries run out.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from streamload import build_loader
from streamload.testing import assert_batches_equal
from streamload.tools.convert import open_writer
from tests.helpers.corpus_factory import document_tokens
from tests.servers.http import FaultPlan, FaultProxy
from tests.servers.s3 import S3Server

pytest.importorskip("moto.server")
pytest.importorskip("s3fs")

FAST = {"retries": 2, "backoff": 0.01, "timeout": 5.0, "stall_warning": 2.0, "stall_timeout": 20.0}
"""Short waits so a broken test fails in seconds."""
NAMES = {
    "megatron": "shard_{}",
    "modalities": "shard_{}.pbin",
    "dolma": "part-{}-00000.npy",
    "datatrove": "shard_{}.ds",
    "parquet": "shard_{}.parquet",
    "numpy": "part_{}",
    "arrow": "part_{}",
    "mds": "part_{}",
    "litdata": "part_{}",
}
"""Where each format's part ``i`` is written (a folder of its own for folder outputs)."""
FORMATS = list(NAMES)
TOKEN_FILES = {
    "megatron": "shard_1.bin",
    "modalities": "shard_1.pbin",
    "dolma": "part-1-00000.npy",
    "datatrove": "shard_1.ds",
    "parquet": "shard_1.parquet",
    "numpy": "part_1/shard_",
    "arrow": "part_1/data-",
    "mds": "part_1/shard.",
    "litdata": "part_1/chunk-",
}
"""Part 1's token file(s) (the first GETs of a part are often its listing or index)."""
COMPANIONS = {
    "megatron": "shard_1.idx",
    "dolma": "part-1-00000.csv.gz",
    "datatrove": "shard_1.ds.index",
    "numpy": "part_1/shard_",  # none: its token file again
    "modalities": "shard_1.pbin",
    "parquet": "shard_1.parquet",
    "arrow": "part_1/state.json",
    "mds": "part_1/index.json",
    "litdata": "part_1/index.json",
}
"""Part 1's index or other companion file, where the format has one."""
TARGETS = {"part": NAMES, "tokens": TOKEN_FILES, "companion": COMPANIONS}
FAULTS = [("part", 1), ("part", 2), ("tokens", 1), ("tokens", 2), ("tokens", 3),
          ("companion", 1), ("companion", 2)]  # fmt: skip
"""(what, n): the n-th GET of part 1's files, token file or companion answers 500."""
FOLDER_FORMATS = ("numpy", "arrow", "mds", "litdata")


def write_parts(folder: Path, fmt: str) -> list[str]:
    """Documents of 3,000 tokens (uint16, EOS 0) in three parts of ``fmt``; returns the
    source's paths relative to ``folder`` (the folder, or each part folder)."""
    tokens = document_tokens(3000, eos_token_id=0, vocab_size=1000, mean_doc_len=20.0, seed=3)
    docs = np.split(tokens.astype(np.uint16), np.flatnonzero(tokens == 0)[:-1] + 1)
    folder.mkdir(parents=True)
    for part, chunk in enumerate(np.array_split(np.arange(len(docs)), 3)):
        with open_writer(fmt, str(folder / NAMES[fmt].format(part)), np.dtype("uint16")) as w:
            for i in chunk.tolist():
                w.add_document(docs[i])
    return [NAMES[fmt].format(i) for i in range(3)] if fmt in FOLDER_FORMATS else [""]


def config(path: str | list[str], fmt: str, **storage: Any) -> dict[str, Any]:
    source: dict[str, Any] = {"name": "web", "path": path, "format": fmt}
    source.update(storage.pop("source", {}))
    cfg: dict[str, Any] = {"seq_len": 16, "seed": 0, "eos_token_id": 0, "vocab_size": 1000,
                           "packing": {"masks": True}, "sources": [source]}  # fmt: skip
    if storage:
        cfg["storage"] = storage
    return cfg


def batches(cfg: dict[str, Any]) -> tuple[list[dict[str, torch.Tensor]], dict[str, Any]]:
    with build_loader(cfg, batch_size=4) as loader:
        got = list(loader)
        return got, loader.stats().get("storage", {}).get("web", {})


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Per format: (local folder, the source's paths in it, the local batches)."""
    out = {}
    for fmt in FORMATS:
        folder = tmp_path_factory.mktemp("formats") / fmt
        parts = write_parts(folder, fmt)
        local, _ = batches(config([str(folder / p) for p in parts], fmt))
        out[fmt] = (folder, parts, local)
    return out


@pytest.fixture
def corpora(written: dict[str, Any], s3: S3Server) -> Any:
    """``corpora[fmt]``: (the source's S3 paths, the local batches), uploaded under a fresh
    prefix for each test: an index read by an earlier test of this process is not read
    again (parsed indexes are kept per URL), so the proxy would never see its GET."""

    class Uploads:
        def __getitem__(self, fmt: str) -> tuple[list[str], Any]:
            folder, parts, local = written[fmt]
            url = s3.upload_folder(folder, "formats", uuid.uuid4().hex[:12])
            return [f"{url}/{p}".rstrip("/") for p in parts], local

    return Uploads()


def remote(
    s3: S3Server, proxy: FaultProxy, url: list[str], fmt: str, cache: Path, **kw: Any
) -> Any:
    options = s3.storage_options(
        proxy.endpoint, config_kwargs={"retries": {"total_max_attempts": 1}}
    )
    source = {"storage_options": options, **kw.pop("source", {})}
    return config(url, fmt, cache_dir=str(cache), source=source, **{**FAST, **kw})


@pytest.mark.filterwarnings("ignore:each pass")
def _cases(cases: list[tuple[str, ...]], fast: set[tuple[str, ...]]) -> list[Any]:
    """Every case; those not in ``fast`` in the slow tier (each builds a remote loader)."""
    slow = (pytest.mark.slow,)
    return [
        pytest.param(*c, marks=() if c in fast else slow, id="-".join(map(str, c))) for c in cases
    ]


@pytest.mark.parametrize(
    ("fmt", "what", "nth"),
    _cases(
        [(f, w, n) for f in FORMATS for w, n in FAULTS],
        {("parquet", "tokens", 2), ("megatron", "part", 2)},
    ),
)
def test_one_server_error_is_retried(
    fmt: str, what: str, nth: int, corpora: Any, s3: S3Server, tmp_path: Path
) -> None:
    url, local = corpora[fmt]
    part = TARGETS[what][fmt].format(1)
    plan = FaultPlan(fail_nth=(part, nth), fail_status=500)
    with FaultProxy(s3.endpoint, plan) as proxy:
        got, stats = batches(remote(s3, proxy, url, fmt, tmp_path / "cache"))
    assert_batches_equal(local, got, f"{fmt}: a 500 on GET {nth} of {part}")
    # The data is exact although a GET failed: it was retried (a listing's retry is not
    # counted in the read statistics, a read's is).
    assert plan.injected["errors"] == 1 or nth > 1, plan.gets  # every part is read once
    assert stats.get("skipped_shards", 0) == stats.get("skipped_samples", 0) == 0, stats


@pytest.mark.filterwarnings("ignore:each pass", "ignore:.*skip", "ignore:.*unreadable")
@pytest.mark.parametrize("fmt", _cases([(f,) for f in FORMATS], {("parquet",)}))
def test_a_shard_failing_past_its_retries_is_skipped(
    fmt: str, corpora: Any, s3: S3Server, tmp_path: Path
) -> None:
    """``on_error = "skip"``: a token file whose every GET answers 500 is left out at
    start-up (or its samples skipped), counted, never refused as corrupt. (A listing or an
    ``index.json`` that stays unreadable is an error: which shards exist is unknown.)"""
    url, local = corpora[fmt]
    plan = FaultPlan(fail_paths=(TOKEN_FILES[fmt],), fail_status=500, fail_whole_reads=True)
    with FaultProxy(s3.endpoint, plan) as proxy:
        cfg = remote(s3, proxy, url, fmt, tmp_path / "cache", retries=1,
                     source={"on_error": "skip"})  # fmt: skip
        got, stats = batches(cfg)
    assert stats["skipped_shards"] + stats["skipped_samples"] > 0, stats
    assert got and len(got) <= len(local)


@pytest.mark.filterwarnings("ignore:each pass", "ignore:.*skip", "ignore:.*unreadable")
@pytest.mark.parametrize(
    ("fmt", "mode"),
    _cases(
        [(f, m) for f in ("litdata", "numpy") for m in ("packed", "padded")], {("numpy", "packed")}
    ),
)
def test_a_shard_unreadable_at_plan_build_is_left_out(
    fmt: str, mode: str, corpora: Any, s3: S3Server, tmp_path: Path
) -> None:
    """Whole-document modes find the documents of a format without an index at EOS, reading
    every shard's tokens to build their plan at start-up. Under ``on_error = "skip"`` a shard
    whose header was read but whose tokens stay unreadable then is left out and counted like
    one whose header is (docs/remote.md), not a ``RemoteReadError`` (issue 36). The batches
    equal a read of the other parts."""
    url, _ = corpora[fmt]
    # the header's GET passes, every later one fails
    plan = FaultPlan(fail_nth=(TOKEN_FILES[fmt], 2), fail_count=1000, fail_status=500)
    sampling = {"sampling": {"mode": mode}, "pad_token_id": 1}
    with FaultProxy(s3.endpoint, plan) as proxy:
        cfg = remote(s3, proxy, url, fmt, tmp_path / "cache", retries=1,
                     source={"on_error": "skip"})  # fmt: skip
        cfg.update(sampling)
        got, stats = batches(cfg)
    assert plan.injected["errors"] > 0
    assert stats["skipped_shards"] == 1 and stats["skipped_samples"] == 0, stats
    assert any(TOKEN_FILES[fmt] in path for path in stats["skipped"]), stats["skipped"]
    kept = [u for u in url if NAMES[fmt].format(1) not in u]
    cfg = config(kept, fmt, cache_dir=str(tmp_path / "c2"), **FAST,
                 source={"storage_options": s3.storage_options()})  # fmt: skip
    expected, _ = batches({**cfg, **sampling})
    assert_batches_equal(expected, got, f"{fmt} {mode}: part 1 left out")
    # Every part readable again, the same cache: the plan of the parts kept was cached under
    # their own description, so the whole source gets its own plan, not that one.
    whole = config(url, fmt, cache_dir=str(tmp_path / "cache"), **FAST,
                   source={"storage_options": s3.storage_options()})  # fmt: skip
    fresh = config(url, fmt, cache_dir=str(tmp_path / "c3"), **FAST,
                   source={"storage_options": s3.storage_options()})  # fmt: skip
    again, _ = batches({**whole, **sampling})
    assert_batches_equal(batches({**fresh, **sampling})[0], again, f"{fmt} {mode}: whole again")
