"""``gs://`` and ``az://`` sources against real protocol emulators on 127.0.0.1.

* GCS: ``gcp-storage-emulator`` (Python, the JSON API) read through gcsfs;
* Azure Blob: Microsoft's ``azurite`` (Node.js, ``npm ci --prefix tests/servers/azurite``) read
  through adlfs.

Each test compares the exact ordered batches read from the emulator with those of the local
copy of the same files (docs/remote.md: the same batches, whatever the storage). A cloud's
tests are skipped, naming what to install, only when its emulator or fsspec backend is absent.
"""

from __future__ import annotations

import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pytest
import torch

from streamload import build_loader
from streamload.errors import RemoteReadError
from streamload.testing import assert_batches_equal, assert_resumes_exactly
from streamload.tools.convert import open_writer
from tests.helpers.corpus_factory import Corpus, document_tokens

FAST = {"retries": 3, "backoff": 0.01, "timeout": 10.0, "stall_warning": 5.0, "stall_timeout": 30.0}
"""Short waits so a broken test fails in seconds."""


class Cloud(Protocol):
    """What the tests need of an emulator (``tests/servers/gcs.py``, ``tests/servers/azure.py``)."""

    def upload_folder(self, folder: Path, bucket: str, prefix: str) -> str: ...

    def storage_options(self, **extra: Any) -> dict[str, Any]: ...

    def filesystem(self) -> Any: ...


def _gcs() -> Iterator[Cloud]:
    pytest.importorskip("gcsfs", reason="gcsfs (fsspec's gs:// backend) is not installed")
    pytest.importorskip("gcp_storage_emulator", reason="pip install gcp-storage-emulator")
    from tests.servers.gcs import GCSServer

    with GCSServer() as server:
        yield server


def _azure() -> Iterator[Cloud]:
    pytest.importorskip("adlfs", reason="adlfs (fsspec's az:// backend) is not installed")
    from tests.servers.azure import AzuriteServer, azurite_command

    if shutil.which("node") is None:
        pytest.skip("Node.js (node) is not on PATH; azurite needs it")
    if azurite_command() is None:
        pytest.skip("azurite is not installed: npm ci --prefix tests/servers/azurite")
    with AzuriteServer() as server:
        yield server


@pytest.fixture(scope="module", params=["gs", "az"])
def cloud(request: pytest.FixtureRequest) -> Iterator[Cloud]:
    """A running emulator of each cloud (one per module)."""
    yield from {"gs": _gcs, "az": _azure}[request.param]()


@pytest.fixture
def upload(cloud: Cloud) -> Callable[[Path], str]:
    """Upload a folder under a fresh prefix; returns its URL (``gs://...`` or ``az://...``)."""

    def run(folder: Path) -> str:
        return cloud.upload_folder(folder, "corpora", uuid.uuid4().hex[:12])

    return run


def remote_config(corpus: Corpus, url: Any, cloud: Cloud, cache: Path) -> dict[str, Any]:
    """The corpus's config with its source read from ``url`` on ``cloud``."""
    return corpus.config(
        seq_len=16,
        source={"path": url, "storage_options": cloud.storage_options()},
        storage={"cache_dir": str(cache), **FAST},
    )


def batches(config: dict[str, Any], **kwargs: Any) -> list[dict[str, torch.Tensor]]:
    with build_loader(config, batch_size=4, **kwargs) as loader:
        return list(loader)


@pytest.mark.filterwarnings("ignore:each pass")
@pytest.mark.parametrize("workers", [0, 2])
def test_batches_equal_local(
    make_corpus: Callable[..., Corpus], upload: Callable[[Path], str], cloud: Cloud,
    tmp_path: Path, workers: int,
) -> None:  # fmt: skip
    corpus = make_corpus([700, 300, 900, 450])
    url = upload(corpus.folder)
    local = batches(corpus.config(seq_len=16), num_workers=workers)
    config = remote_config(corpus, url, cloud, tmp_path / "cache")
    with build_loader(config, batch_size=4, num_workers=workers) as loader:
        remote = list(loader)
        stats = loader.stats()["storage"]["web"]
    assert_batches_equal(local, remote, f"{url} vs local")
    # No error, retry or short body: the emulator honours each byte range asked for.
    assert stats["requests"] > 0 and stats["errors"] == stats["retries"] == stats["truncated"] == 0


@pytest.mark.filterwarnings("ignore:each pass")
def test_path_forms_list_alike(
    make_corpus: Callable[..., Corpus], upload: Callable[[Path], str], cloud: Cloud,
    tmp_path: Path,
) -> None:  # fmt: skip
    """A folder (with or without ``/``), a glob and a list of files give the local order."""
    corpus = make_corpus([300, 200, 400], fmt="raw")
    url = upload(corpus.folder)
    local = batches(corpus.config(seq_len=16, source={"format": "raw"}))
    shuffled = [corpus.paths[i] for i in (2, 0, 1)]  # a list keeps its own order
    listed = batches(
        corpus.config(seq_len=16, source={"format": "raw", "path": [str(p) for p in shuffled]})
    )
    forms = [(url, local), (url + "/", local), (url + "/shard_*.bin", local),
             ([f"{url}/{p.name}" for p in shuffled], listed)]  # fmt: skip
    for path, expected in forms:
        config = remote_config(corpus, path, cloud, tmp_path / "cache")
        config["sources"][0]["format"] = "raw"
        assert_batches_equal(expected, batches(config), f"path = {path!r}")


@pytest.mark.filterwarnings("ignore:each pass")
def test_replaced_object_is_not_read_from_cache(
    make_corpus: Callable[..., Corpus], upload: Callable[[Path], str], cloud: Cloud,
    tmp_path: Path,
) -> None:  # fmt: skip
    """Overwriting the objects (same sizes, other tokens) changes their ETag, so a later job
    sharing the disk cache reads the new bytes, never the cached old ones."""
    old, new = make_corpus([400, 500], seed=1), make_corpus([400, 500], seed=2)
    url = upload(old.folder)
    config = remote_config(old, url, cloud, tmp_path / "cache")
    assert_batches_equal(batches(old.config(seq_len=16)), batches(config), "before")
    bucket, prefix = url.split("://", 1)[1].split("/", 1)
    cloud.upload_folder(new.folder, bucket, prefix)
    assert_batches_equal(batches(new.config(seq_len=16)), batches(config), "after overwriting")


@pytest.mark.filterwarnings("ignore:each pass")
def test_missing_object_is_named_at_once(
    make_corpus: Callable[..., Corpus], upload: Callable[[Path], str], cloud: Cloud,
    tmp_path: Path,
) -> None:  # fmt: skip
    """A 404 maps to FileNotFoundError in the backend: no retries, the object is named."""
    corpus = make_corpus([500, 400, 600], fmt="raw")
    url = upload(corpus.folder)
    config = remote_config(corpus, url, cloud, tmp_path / "cache")
    config["sources"][0]["format"] = "raw"
    loader = build_loader(config, batch_size=4)
    missing = f"{url.split('://', 1)[1]}/shard_00001.bin"
    cloud.filesystem().rm(missing)
    # Named in the scheme the config wrote (adlfs's own first protocol would be abfs://).
    with pytest.raises(RemoteReadError, match=rf"{re.escape(url)}/shard_00001\.bin: cannot read"):
        list(loader)
    assert loader.stats()["storage"]["web"]["retries"] == 0


@pytest.mark.filterwarnings("ignore:each pass")
def test_resumes_exactly_on_local_copy(
    make_corpus: Callable[..., Corpus], upload: Callable[[Path], str], cloud: Cloud,
    tmp_path: Path,
) -> None:  # fmt: skip
    corpus = make_corpus([500, 600, 400])
    config = remote_config(corpus, upload(corpus.folder), cloud, tmp_path / "cache")
    assert_resumes_exactly(
        lambda: build_loader(config, batch_size=4, num_workers=2),
        make_resumed=lambda: build_loader(corpus.config(seq_len=16), batch_size=4),
        save_points=[0, 1, 5, 17],
        passes=2,
    )


@pytest.mark.filterwarnings("ignore:each pass")
def test_megatron_bin_idx_read_remotely(
    make_corpus: Callable[..., Corpus], upload: Callable[[Path], str], cloud: Cloud,
    tmp_path: Path,
) -> None:  # fmt: skip
    """Megatron shards (token ``.bin`` + ``.idx`` companion): document masks from the index."""
    tokens = document_tokens(3000, eos_token_id=0, vocab_size=1000, mean_doc_len=20.0, seed=3)
    docs = np.split(tokens.astype(np.uint16), np.flatnonzero(tokens == 0)[:-1] + 1)
    folder = tmp_path / "megatron"
    folder.mkdir()
    for part, chunk in enumerate(np.array_split(np.arange(len(docs)), 3)):
        with open_writer("megatron", str(folder / f"shard_{part}"), np.dtype("uint16")) as w:
            for i in chunk.tolist():
                w.add_document(docs[i])
    base = make_corpus([10])  # only for its config helper
    url = upload(folder)
    # A folder, and Megatron's path prefix (data/shard_1 means shard_1.bin + shard_1.idx).
    for local_path, remote_path in [
        (str(folder), url),
        (str(folder / "shard_1"), f"{url}/shard_1"),
    ]:
        local_cfg = base.config(seq_len=16, packing={"masks": True})
        local_cfg["sources"] = [{"name": "web", "path": local_path, "format": "megatron"}]
        remote_source = {"name": "web", "path": remote_path, "format": "megatron",
                         "storage_options": cloud.storage_options()}  # fmt: skip
        storage = {"cache_dir": str(tmp_path / "cache"), **FAST}
        remote_cfg = {**local_cfg, "sources": [remote_source], "storage": storage}
        local = batches(local_cfg)
        assert "doc_ids" in local[0]
        assert_batches_equal(local, batches(remote_cfg, num_workers=2), f"megatron {remote_path}")
