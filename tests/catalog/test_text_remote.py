"""Text sources on object storage: text inputs on S3, token caches on S3, against moto's S3
server on 127.0.0.1 (``tests/servers/s3.py``).

The promises (issue 32, items 2, 3 and 5): remote inputs give the batches of the same files
read locally; a remote cache (``cache_dir = "s3://…"``) is filled once, with nothing staged
left behind, and mapped by later starts; ranks sharing it each tokenize their share and
wait for the others' markers, failing with the builder's message (never waiting forever)
when a file is bad; a changed object gets a new entry beside the old one; resumption on a
remote cache is exact.
"""

from __future__ import annotations

import gzip
import json
import multiprocessing
import re
import shutil
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import streamload
from streamload.catalog.sources import describe_source
from streamload.catalog.text_source import list_text_inputs, prepare_text_source, text_cache
from streamload.config import SourceConfig, load_config
from streamload.errors import FormatError, RemoteReadError
from streamload.testing import assert_batches_equal, assert_resumes_exactly
from streamload.tokenize.text_build import deal
from streamload.tokenize.text_cache import TextCache
from tests.catalog.test_text_source import batches, text_config, write_corpus
from tests.servers.s3 import S3Server

pytest.importorskip("moto.server")
pytest.importorskip("s3fs")
pytestmark = pytest.mark.filterwarnings("ignore:each pass")

FIXTURES = Path(__file__).parents[1] / "fixtures" / "text"

FAST = {"retries": 2, "backoff": 0.01, "timeout": 5.0}
"""Short waits so a broken test fails in seconds."""

CHILD_SECONDS = 120
"""How long a rank process may take before the test calls it hung."""

_PART = re.compile(
    r"[0-9a-f]{24}(-\d{5}\.(bin|idx)|\.json)|manifests/[0-9a-f]{32}\.json|settings\.json"
)
"""The names a finished settings folder holds (``tokenize/text_cache.py``)."""


def remote_config(
    inputs: str | Path, cache_dir: str | Path, s3: S3Server, tmp: Path, mode: str = "concat",
    **options: Any,
) -> dict[str, Any]:  # fmt: skip
    """A text source reading ``inputs`` into ``cache_dir`` with the server's options
    (``options`` added to them), its storage cache under ``tmp``."""
    options = s3.storage_options(**options)
    config = text_config(inputs, tmp / "unused", mode, storage_options=options)
    config["sources"][0]["cache_dir"] = str(cache_dir)
    config["storage"] = {"cache_dir": str(tmp / "storage-cache"), **FAST}
    return config


def source_of(config: dict[str, Any]) -> SourceConfig:
    return SourceConfig(**config["sources"][0])


def new_bucket(s3: S3Server) -> str:
    name = f"b{uuid.uuid4().hex[:12]}"
    s3.client().create_bucket(Bucket=name)
    return name


def objects(s3: S3Server, bucket: str, prefix: str = "") -> dict[str, str]:
    """Key → ETag of every object under ``prefix``."""
    pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}


def gzip_some(folder: Path) -> None:
    """Every third JSONL file of ``folder`` compressed in place (``.jsonl.gz``)."""
    for path in sorted(folder.glob("*.jsonl"))[::3]:
        Path(f"{path}.gz").write_bytes(gzip.compress(path.read_bytes(), mtime=0))
        path.unlink()


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    write_corpus(tmp_path / "in", files=6)
    gzip_some(tmp_path / "in")
    return tmp_path / "in"


def kinds_folder(folder: Path) -> Path:
    """``folder`` with a file of every other kind beside its JSONL: Parquet (datasets'
    ``to_parquet``), an Arrow IPC file and zstd-compressed JSONL (``tests/fixtures/text``)."""
    for name in ("to_parquet/train.parquet", "ipc_file/text.arrow", "jsonl/docs.jsonl.zst"):
        shutil.copy(FIXTURES / name, folder)
    return folder


@pytest.mark.parametrize(
    ("kinds", "mode"), [("mixed", "concat"), ("mixed", "packed"), ("mds", "concat")]
)
def test_text_on_s3_reads_as_the_same_files_read_locally(
    inputs: Path, s3: S3Server, tmp_path: Path, kinds: str, mode: str
) -> None:
    folder = kinds_folder(inputs) if kinds == "mixed" else FIXTURES / "mds" / "zstd"
    url = s3.upload_folder(folder, new_bucket(s3), "corpus")
    local = text_config(folder, tmp_path / "local-cache", mode)
    remote = remote_config(url, tmp_path / "cache", s3, tmp_path, mode)
    listed = [i.relpath for i in list_text_inputs(source_of(remote))]
    assert listed == [i.relpath for i in list_text_inputs(source_of(local))]
    assert len(listed) == (9 if kinds == "mixed" else 2)
    assert_batches_equal(batches(local), batches(remote), "text on s3 vs local")


@pytest.mark.parametrize("where", ["local", "s3"])
def test_an_s3_cache_is_filled_once_then_mapped(
    inputs: Path, s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    bucket = new_bucket(s3)
    url = s3.upload_folder(inputs, bucket, "corpus") if where == "s3" else inputs
    config = remote_config(url, f"s3://{bucket}/cache", s3, tmp_path)
    first = batches(config)
    cache = text_cache(source_of(config))
    key = cache.key
    published = objects(s3, bucket, f"cache/{key}/")
    names = [k.removeprefix(f"cache/{key}/") for k in published]
    assert all(_PART.fullmatch(n) for n in names), names  # nothing staged, no error marker
    assert sum(n.endswith(".bin") for n in names) == 6
    assert sum(n.endswith(".idx") for n in names) == 6
    assert sum(n.endswith(".json") and "/" not in n for n in names) == 7  # and settings.json
    body = s3.client().get_object(Bucket=bucket, Key=f"cache/{key}/settings.json")["Body"]
    assert json.loads(body.read())["tokenizer_sha256"] == cache.tokenizer_sha256
    assert sum(n.startswith("manifests/") for n in names) == 1
    storage = load_config(config).storage
    for shard in describe_source(source_of(config), storage=storage).shards:
        stem = shard.path.removeprefix(f"s3://{bucket}/").removesuffix(".bin")
        assert shard.version == published[f"{stem}.bin"]  # read only in the listed version
        assert list(shard.companions.values()) == [published[f"{stem}.idx"]]

    def no_tokenizing(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a filled cache was tokenized again")

    with monkeypatch.context() as patched:
        patched.setattr(TextCache, "build", no_tokenizing)
        assert prepare_text_source(source_of(config)).built == 0
        assert_batches_equal(first, batches(config), "second start")
    assert objects(s3, bucket, f"cache/{key}/") == published
    local = text_config(inputs, tmp_path / "local-cache")
    assert_batches_equal(batches(local), first, "s3 cache vs local cache")


def _prepare_as_rank(source: dict[str, Any], rank: int, queue: Any) -> None:
    """A rank of two: its share tokenized, the other's waited for; reports what it got."""
    import os

    try:
        report = prepare_text_source(SourceConfig(**source), rank=rank, world=2)
        queue.put((rank, os.getpid(), report.built, report.markers, None))
    except FormatError as exc:
        queue.put((rank, os.getpid(), 0, [], str(exc)))


def _run_ranks(source: SourceConfig) -> dict[int, tuple[int, int, list[Any], str | None]]:
    """Both ranks run in processes of their own; rank → (pid, built, markers, error)."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    fields = {f: getattr(source, f) for f in ("name", "tokenizer", "eos_token_id", "cache_dir",
                                              "storage_options")}  # fmt: skip
    fields["path"] = source.paths[0]
    children = [
        context.Process(target=_prepare_as_rank, args=(fields, rank, queue)) for rank in (0, 1)
    ]
    for child in children:
        child.start()
    try:
        results = [queue.get(timeout=CHILD_SECONDS) for _ in children]
    finally:
        for child in children:
            child.join(timeout=10)
            if child.is_alive():
                child.kill()
    assert [child.exitcode for child in children] == [0, 0]
    return {rank: rest for rank, *rest in results}  # type: ignore[misc]


def test_two_ranks_share_an_s3_cache(inputs: Path, s3: S3Server, tmp_path: Path) -> None:
    bucket = new_bucket(s3)
    source = source_of(remote_config(inputs, f"s3://{bucket}/cache", s3, tmp_path))
    listed = list_text_inputs(source)
    owner = deal([i.size for i in listed], 2)
    assert sorted(set(owner)) == [0, 1]
    ranks = _run_ranks(source)
    assert ranks[0][3] is None and ranks[1][3] is None
    assert ranks[0][2] == ranks[1][2]  # the same markers, in input order
    for rank, (pid, built, markers, _) in ranks.items():
        assert built == owner.count(rank)
        mine = [m for m, o in zip(markers, owner, strict=True) if o == rank]
        assert all(m["built"].split("-")[1] == str(pid) for m in mine)  # built by that rank
    assert [m["input"]["relpath"] for m in ranks[0][2]] == [i.relpath for i in listed]
    assert prepare_text_source(source).built == 0


def test_a_waiting_rank_lists_the_cache_instead_of_asking_for_every_file(
    inputs: Path, s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 0 waits on rank 1 (here a thread, started late): one listing a round, and each of
    rank 1's markers read once, when it is listed (not a request per file and round)."""
    bucket = new_bucket(s3)
    source = source_of(remote_config(inputs, f"s3://{bucket}/cache", s3, tmp_path))
    listed = list_text_inputs(source)
    theirs = deal([i.size for i in listed], 2).count(1)
    looks = {"names": 0, "markers": 0, "errors": 0}
    waiting = threading.Event()
    counted = [("names", TextCache.names), ("markers", TextCache.marker),
               ("errors", TextCache.failure)]  # fmt: skip
    for what, real in counted:

        def counting(self: TextCache, *args: Any, _what: str = what, _real: Any = real) -> Any:
            if threading.current_thread().name == "rank-0" and waiting.is_set():
                looks[_what] += 1
            return _real(self, *args)

        monkeypatch.setattr(TextCache, real.__name__, counting)
    import streamload.tokenize.text_wait as text_wait

    poll = text_wait.poll_markers

    def announced(*args: Any) -> None:
        waiting.set()
        poll(*args)

    monkeypatch.setattr(text_wait, "poll_markers", announced)
    reports: list[Any] = []
    rank_0 = threading.Thread(
        target=lambda: reports.append(prepare_text_source(source, rank=0, world=2)),
        name="rank-0", daemon=True,
    )  # fmt: skip
    rank_0.start()
    assert waiting.wait(CHILD_SECONDS)
    time.sleep(3)  # a few rounds with nothing to find
    assert looks["markers"] == looks["errors"] == 0 and looks["names"] >= 1
    rank_1 = prepare_text_source(source, rank=1, world=2)
    rank_0.join(timeout=CHILD_SECONDS)
    assert not rank_0.is_alive()
    assert looks["markers"] == theirs and looks["errors"] == 0
    assert reports[0].markers == rank_1.markers


def test_a_bad_file_of_the_other_rank_fails_the_waiting_rank(
    inputs: Path, s3: S3Server, tmp_path: Path
) -> None:
    bucket = new_bucket(s3)
    source = source_of(remote_config(inputs, f"s3://{bucket}/cache", s3, tmp_path))
    listed = list_text_inputs(source)
    owner = deal([i.size for i in listed], 2)
    bad = next(Path(i.url) for i, o in zip(listed, owner, strict=True)
               if o == 1 and i.url.endswith(".jsonl"))  # fmt: skip
    with open(bad, "rb+") as fh:  # the same size, so the same deal: a line that is not JSON
        fh.write(b"x")
    assert deal([i.size for i in list_text_inputs(source)], 2) == owner
    ranks = _run_ranks(source)
    message = ranks[1][3]
    assert message is not None and f"{bad.name}: line 1 is not valid JSON" in message
    assert ranks[0][3] == message
    key = text_cache(source).key
    errors = [k for k in objects(s3, bucket, f"cache/{key}/") if k.endswith(".error.json")]
    assert len(errors) == 1


def test_a_storage_error_of_the_other_rank_fails_the_waiting_rank(
    inputs: Path, s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A storage client's own error (not an OSError) while rank 1 reads a file is named as a
    RemoteReadError and recorded, so rank 0, waiting on that file, fails with its message."""
    from botocore.exceptions import EndpointConnectionError

    from streamload.tokenize import text_file as cache_module

    bucket = new_bucket(s3)
    url = s3.upload_folder(inputs, bucket, "corpus")
    source = source_of(remote_config(url, f"s3://{bucket}/cache", s3, tmp_path))
    listed = list_text_inputs(source)
    owner = deal([i.size for i in listed], 2)
    lost = next(i.url for i, o in zip(listed, owner, strict=True) if o == 1)
    opener = cache_module.open_text

    def unreachable(url: str, *args: Any) -> Any:
        if url == lost:
            raise EndpointConnectionError(endpoint_url=url)
        return opener(url, *args)

    monkeypatch.setattr(cache_module, "open_text", unreachable)
    with pytest.raises(RemoteReadError, match="EndpointConnectionError") as built:
        prepare_text_source(source, rank=1, world=2)
    assert lost in str(built.value)
    waited: list[BaseException] = []

    def rank_0() -> None:
        try:
            prepare_text_source(source, rank=0, world=2)
        except BaseException as exc:
            waited.append(exc)

    import streamload.tokenize.text_wait as text_wait

    # rank 1 failed before rank 0 looked: its error marker stands, so it is this run's
    monkeypatch.setattr(text_wait, "STALE_ERROR_GRACE", 2.0)
    thread = threading.Thread(target=rank_0, daemon=True)
    thread.start()
    thread.join(timeout=CHILD_SECONDS)
    assert not thread.is_alive(), "rank 0 still waits on a file whose build failed"
    assert [type(e) for e in waited] == [FormatError]
    assert str(waited[0]) == str(built.value)


def test_an_old_error_marker_is_cleared_by_the_rank_that_builds_the_file(
    inputs: Path, s3: S3Server, tmp_path: Path
) -> None:
    """An error marker of an earlier run (an unreadable input, say) would fail the ranks
    waiting on the file now: its builder removes it before building, and a success
    leaves none."""
    bucket = new_bucket(s3)
    source = source_of(remote_config(inputs, f"s3://{bucket}/cache", s3, tmp_path))
    prepare_text_source(source)
    listed = list_text_inputs(source)
    item = next(i for i, o in zip(listed, deal([i.size for i in listed], 2), strict=True) if o)
    cache = text_cache(source)
    key = f"cache/{cache.key}/{cache.file_key(item)}"
    client = s3.client()
    client.delete_object(Bucket=bucket, Key=f"{key}.json")
    for manifest in objects(s3, bucket, f"cache/{cache.key}/manifests/"):
        client.delete_object(Bucket=bucket, Key=manifest)
    client.put_object(Bucket=bucket, Key=f"{key}.error.json", Body=b'{"error": "old failure"}')
    assert prepare_text_source(source, rank=1, world=2).built == 1  # its one missing file
    now = objects(s3, bucket, f"cache/{cache.key}/")
    assert f"{key}.json" in now and not [k for k in now if k.endswith(".error.json")]
    assert cache.failure(item) is None


def test_a_changed_object_is_tokenized_again_beside_the_old_entry(
    inputs: Path, s3: S3Server, tmp_path: Path
) -> None:
    bucket = new_bucket(s3)
    url = s3.upload_folder(inputs, bucket, "corpus")
    # the instance cache on: one process's file systems keep their listings between starts
    config = remote_config(url, f"s3://{bucket}/cache", s3, tmp_path, skip_instance_cache=False)
    before = batches(config)
    key = text_cache(source_of(config)).key
    published = objects(s3, bucket, f"cache/{key}/")
    changed = sorted(inputs.glob("*.jsonl"))[0]
    text = changed.read_bytes()
    swapped = text.replace(b"fox", b"dog", 1)  # the same size, another ETag
    assert len(swapped) == len(text) and swapped != text
    s3.client().put_object(Bucket=bucket, Key=f"corpus/{changed.name}", Body=swapped)
    report = prepare_text_source(source_of(config))
    assert report.built == 1
    now = objects(s3, bucket, f"cache/{key}/")
    assert {k: now[k] for k in published} == published  # the old entry left alone
    new = sorted(set(now) - set(published))
    assert sorted(Path(k).suffix for k in new) == [".bin", ".idx", ".json", ".json"]
    assert sum("/manifests/" in k for k in new) == 1
    changed.write_bytes(swapped)
    local = text_config(inputs, tmp_path / "local-cache")
    after = batches(config)
    assert_batches_equal(batches(local), after, "changed object vs local")
    assert not all(a["input_ids"].equal(b["input_ids"]) for a, b in zip(before, after, strict=True))
    catalog = describe_source(source_of(config), storage=load_config(config).storage)
    assert catalog.shards.num_tokens.sum() == report.total("tokens")


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_on_an_s3_cache_is_exact(
    inputs: Path, s3: S3Server, tmp_path: Path, workers: int
) -> None:
    bucket = new_bucket(s3)
    config = remote_config(inputs, f"s3://{bucket}/cache", s3, tmp_path, "packed")
    prepare_text_source(source_of(config))  # filled once, by this process

    def make() -> Any:
        return streamload.build_loader(config, batch_size=4, num_workers=workers)

    assert_resumes_exactly(make, save_points=[0, 3, 17, 40])
