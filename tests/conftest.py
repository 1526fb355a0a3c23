"""Shared fixtures: small synthetic token corpora on disk, the path of the test data, and a
loopback S3 server. The helpers behind them live in :mod:`tests.helpers`.

``make_corpus`` is a factory: every call writes a fresh folder of shards whose tokens are
documents of log-normal length, each ending in EOS, concatenated and cut into shards of the
requested sizes (so documents may span shards, as in real tokenized corpora)::

    def test_something(make_corpus):
        corpus = make_corpus([300, 200], fmt="raw", dtype="uint32")
        folder, shards = corpus             # a Corpus also unpacks as (folder, tokens)
        stream = SampleStream.from_config(load_config(corpus.config(seq_len=16)))

The factory is session-scoped (folders come from ``tmp_path_factory``), so it can be used
inside ``hypothesis`` tests too; its corpora are :class:`tests.helpers.corpus_factory.Corpus`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.corpus_factory import Corpus, write_corpus
from tests.helpers.paths import DATA


@pytest.fixture(scope="session", autouse=True)
def _private_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Caches the tests make by default (packing plans, remote blocks) go to a fresh folder
    of this run, never to the user's ``~/.cache/streamload`` (child processes inherit it)."""
    before = os.environ.get("STREAMLOAD_CACHE_DIR")
    os.environ["STREAMLOAD_CACHE_DIR"] = str(tmp_path_factory.mktemp("streamload-cache"))
    yield
    if before is None:
        os.environ.pop("STREAMLOAD_CACHE_DIR", None)
    else:
        os.environ["STREAMLOAD_CACHE_DIR"] = before


@pytest.fixture(scope="session")
def make_corpus(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Corpus]:
    """Factory ``make_corpus(shard_sizes=(400, 300, 500), **kwargs) -> Corpus``.

    Each call writes a new folder under the session's temporary root; keyword arguments are
    those of :func:`write_corpus`.
    """

    def make(shard_sizes: Sequence[int] = (400, 300, 500), **kwargs: Any) -> Corpus:
        return write_corpus(tmp_path_factory.mktemp("corpus"), shard_sizes, **kwargs)

    return make


@pytest.fixture
def data_dir() -> Path:
    """The folder of tiny real-tool files (``tests/data``)."""
    return DATA


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    """moto's S3 server on 127.0.0.1 (``tests/servers/s3.py``), one per test module."""
    pytest.importorskip("moto.server")
    from tests.servers.s3 import S3Server

    with S3Server() as server:
        yield server
