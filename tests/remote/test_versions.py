"""Objects are read only in the version listed at start-up: a companion index replaced while
a job runs is an error naming it, an object its store gives no version is never reused from
an earlier copy, and a resized replacement on a store without ETags is an error. Against
moto's S3 server and a loopback HTTP server."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamload import build_loader
from streamload.errors import FormatError, RemoteReadError
from streamload.remote.versions import object_version
from streamload.testing import assert_batches_equal
from streamload.tools.convert import open_writer
from tests.helpers.corpus_factory import Corpus
from tests.servers.http import RangeFileServer
from tests.servers.s3 import S3Server

pytest.importorskip("moto.server")
pytestmark = pytest.mark.filterwarnings("ignore:each pass")

FAST = {"retries": 2, "backoff": 0.01, "timeout": 5.0, "stall_warning": 2.0, "stall_timeout": 20.0}
BASE = {"seq_len": 16, "seed": 0, "eos_token_id": 0, "packing": {"masks": True}}


def _megatron(folder: Path, cuts: np.ndarray) -> None:
    """One dataset of 3000 tokens cut into documents at ``cuts``: with as many cuts, two have
    the same .bin and an .idx of the same size, but other documents."""
    tokens = np.random.default_rng(0).integers(1, 1000, 3000).astype(np.uint16)
    folder.mkdir(parents=True)
    with open_writer("megatron", str(folder / "a"), np.dtype("uint16")) as writer:
        for doc in np.split(tokens, cuts):
            writer.add_document(doc)


@pytest.fixture
def twins(tmp_path: Path) -> tuple[Path, Path]:
    _megatron(tmp_path / "A", np.arange(30, 3000, 30))
    _megatron(tmp_path / "B", np.arange(10, 1000, 10))
    assert (tmp_path / "A/a.idx").stat().st_size == (tmp_path / "B/a.idx").stat().st_size
    return tmp_path / "A", tmp_path / "B"


def _batches(source: dict[str, Any], cache: Path | None = None) -> list[dict[str, Any]]:
    config = {**BASE, "sources": [{"name": "w", "format": "megatron", **source}]}
    if cache is not None:
        config["storage"] = {"cache_dir": str(cache), **FAST}
    with build_loader(config, batch_size=4) as loader:
        return list(loader)


@pytest.mark.slow
def test_a_companion_replaced_after_start_up_is_refused(
    twins: tuple[Path, Path], s3: S3Server, tmp_path: Path
) -> None:
    old, new = twins
    url = s3.upload_folder(old, "versions", uuid.uuid4().hex[:12])
    config = {**BASE, "storage": {"cache_dir": str(tmp_path / "cache"), **FAST},
              "sources": [{"name": "w", "path": url, "format": "megatron",
                           "storage_options": s3.storage_options()}]}  # fmt: skip
    with build_loader(config, batch_size=4) as loader:  # lists the old .idx and its ETag
        bucket, prefix = url.removeprefix("s3://").split("/", 1)
        s3.client().upload_file(str(new / "a.idx"), bucket, f"{prefix}/a.idx")
        with pytest.raises(FormatError, match=r"a\.idx: object is \d+ bytes, version .* but was"):
            list(loader)


def test_an_unversioned_companion_is_never_reused(twins: tuple[Path, Path], tmp_path: Path) -> None:
    """Without ETag or Last-Modified a same-size replacement looks like the old object: the
    next loader must read the new one (its copy is fetched again at each open)."""
    old, new = twins
    served = tmp_path / "served"
    shutil.copytree(old, served)
    cache = tmp_path / "cache"
    with RangeFileServer(served, validators=False) as server:
        source = {"path": f"{server.url}/a.bin"}
        assert_batches_equal(_batches({"path": str(old)}), _batches(source, cache), "old")
        shutil.copy(new / "a.idx", served / "a.idx")
        assert_batches_equal(_batches({"path": str(new)}), _batches(source, cache), "new")


def test_a_resized_object_without_etag_is_refused(
    make_corpus: Callable[..., Corpus], tmp_path: Path
) -> None:
    corpus = make_corpus([600, 500, 700], fmt="raw")
    served = tmp_path / "served"
    shutil.copytree(corpus.folder, served)
    with RangeFileServer(served, validators=False) as server:
        urls = [f"{server.url}/{p.name}" for p in corpus.paths]
        source = {"path": urls, "format": "raw", "storage_options": {}}
        config = corpus.config(seq_len=16, source=source,
                               storage={"cache_dir": str(tmp_path / "c"), **FAST})  # fmt: skip
        with build_loader(config, batch_size=4) as loader:
            for path in corpus.paths:  # every shard grows after start-up
                (served / path.name).write_bytes(path.read_bytes() * 2)
            with pytest.raises(RemoteReadError, match=r"changed since the loader listed it"):
                list(loader)


@pytest.mark.parametrize(
    ("info", "version"),
    [
        ({"ETag": '"abc"', "LastModified": "x"}, '"abc"'),  # S3
        ({"generation": "17", "mtime": 1.0}, "17"),  # GCS
        ({"blob_id": "3f2a", "lfs": None}, "3f2a"),  # Hugging Face
        ({"Last-Modified": "Tue, 01 Jan 2030 00:00:00 GMT"}, "Tue, 01 Jan 2030 00:00:00 GMT"),
        ({"size": 3}, ""),  # nothing to tell versions apart
    ],
)
def test_object_versions_of_each_store(info: dict[str, Any], version: str) -> None:
    assert object_version(info) == version
