"""The Megatron index cache: our own content-addressed files, and megatron-core's files."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import socket
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamload import build_loader, load_config
from streamload.modes.megatron.stream import MegatronStream
from streamload.streams.interface import SampleStream
from streamload.util.index_cache import cache_key, load_or_build
from tests.helpers.paths import TESTS
from tests.helpers.shards import write_megatron_documents
from tests.streams.test_megatron import GOLDENS, config_of, load

FIXTURE = TESTS / "golden" / "megatron_cache"


@pytest.fixture(scope="module")
def prefixes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return GOLDENS.write_datasets(tmp_path_factory.mktemp("megatron_cache_data"))


def stream_of(cfg: dict[str, Any]) -> MegatronStream:
    stream = SampleStream.from_config(load_config(cfg))
    assert isinstance(stream, MegatronStream)
    return stream


def test_own_cache_is_written_once_and_mapped(prefixes: dict[str, str], tmp_path: Path) -> None:
    cfg = config_of("blend_train", prefixes)
    cfg["sampling"]["cache_dir"] = str(tmp_path)
    first = stream_of(cfg)
    files = sorted(p.name for p in tmp_path.iterdir())
    tables = [f for f in files if "-streamload-megatron-sequences-" in f]
    indices = [f for f in files if f not in tables]
    assert len(indices) == 9 and sum(f.endswith("description.json") for f in indices) == 1
    assert len(tables) == 2 * 5 and sum(f.endswith("description.json") for f in tables) == 2
    assert not any(f.endswith((".tmp", ".lock")) for f in files)
    stamps = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    second = stream_of(cfg)
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == stamps  # not rebuilt
    assert all(isinstance(a, np.memmap) for a in second._arrays.values())
    assert all(s.sequences.files is not None for s in second.sources)  # mapped, not rebuilt
    ids = np.arange(second.pass_length or 0)
    np.testing.assert_array_equal(second.read(0, ids)[0], first.read(0, ids)[0])
    np.testing.assert_array_equal(second.read(0, ids)[0], load("blend_train")[1]["text"])


def test_other_inputs_get_other_files(prefixes: dict[str, str], tmp_path: Path) -> None:
    for seed in (1, 2):
        cfg = config_of("gpt_e1_n", prefixes) | {"seed": seed}
        cfg["sampling"]["cache_dir"] = str(tmp_path)
        stream_of(cfg)
    assert len(list(tmp_path.glob("*-streamload-megatron-description.json"))) == 2


@pytest.mark.slow
def test_waits_for_another_builder(tmp_path: Path) -> None:
    """A process that finds the lock waits for the description instead of building."""
    description = {"case": 1}
    key = cache_key(description)
    # The lock names a live owner (this process), so it is never taken for abandoned, however
    # long the spawned builder takes to start on a loaded machine (an empty lock is after
    # LOCK_GRACE_SECONDS).
    lock = tmp_path / f"{key}-streamload-megatron.lock"
    lock.write_text(f"{socket.gethostname()} {os.getpid()}")
    arrays = {"x": np.arange(5)}

    def never() -> dict[str, np.ndarray]:
        raise AssertionError("built although another process holds the lock")

    ctx = multiprocessing.get_context("spawn")
    builder = ctx.Process(target=_build_later, args=(str(tmp_path), description, arrays))
    builder.start()
    got, files = load_or_build(str(tmp_path), description, never)
    builder.join(30)
    np.testing.assert_array_equal(got["x"], arrays["x"])
    assert files is not None and set(files) == {"x"}


def test_a_lock_left_by_a_killed_builder_is_taken_over(tmp_path: Path) -> None:
    """A lock naming a dead process of this host does not make others wait WAIT_SECONDS."""
    import socket
    import subprocess
    import sys

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its pid now names no process (reuse within the test is very unlikely)
    description = {"case": 2}
    lock = tmp_path / f"{cache_key(description)}-streamload-megatron.lock"
    lock.write_text(f"{socket.gethostname()} {dead.pid}")
    arrays = {"x": np.arange(3)}
    got, _ = load_or_build(str(tmp_path), description, lambda: arrays)
    np.testing.assert_array_equal(got["x"], arrays["x"])
    assert not lock.exists()


def _build_later(folder: str, description: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    import time

    from streamload.util import index_cache

    time.sleep(0.5)
    index_cache._Entry(Path(folder), cache_key(description), index_cache.MEGATRON).save(
        description, arrays
    )


@pytest.mark.slow
def test_two_jobs_share_a_folder(prefixes: dict[str, str], tmp_path: Path) -> None:
    cfg = config_of("blend_valid", prefixes)
    cfg["sampling"]["cache_dir"] = str(tmp_path)
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        texts = pool.map(_read_all, [cfg, cfg])
    np.testing.assert_array_equal(texts[0], load("blend_valid")[1]["text"][:40])
    np.testing.assert_array_equal(texts[1], texts[0])
    assert len(list(tmp_path.glob("*-streamload-megatron-description.json"))) == 1


def _read_all(cfg: dict[str, Any]) -> np.ndarray:
    stream = SampleStream.from_config(load_config(cfg))
    return stream.read(0, np.arange(stream.pass_length or 0))[0]


@pytest.mark.slow
def test_process_workers_map_the_cached_files(prefixes: dict[str, str], tmp_path: Path) -> None:
    cfg = config_of("gpt_e3_separate", prefixes)
    cfg["sampling"]["cache_dir"] = str(tmp_path)
    from streamload import LoaderOptions

    options = LoaderOptions(worker_type="process")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batches = list(build_loader(cfg, batch_size=8, num_workers=2, options=options))
    got = np.concatenate([b["input_ids"].numpy() for b in batches])
    np.testing.assert_array_equal(got, load("gpt_e3_separate")[1]["text"][: got.shape[0], :-1])


def test_reads_megatron_core_cache_files(prefixes: dict[str, str], tmp_path: Path) -> None:
    """The checked-in files megatron-core 0.16.1 wrote are used (not rebuilt) and match."""
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True)
    cfg = config_of("gpt_e3_separate", prefixes)
    cfg["sampling"]["cache_dir"] = str(tmp_path)
    stream = stream_of(cfg)
    assert stream._files is not None
    assert all("-GPTDataset-train-" in path for path in stream._files.values())
    ours = [p.name for p in tmp_path.glob("*streamload*") if "-sequences-" not in p.name]
    assert ours == [  # beside the sequence table: only the digests of its files
        "1a12883e83b7ba6fe8cf7bf7f54c3629-GPTDataset-train-streamload-megatron-digests.json"
    ]
    ids = np.arange(stream.pass_length or 0)
    want = load("gpt_e3_separate")[1]["text"][: ids.size]
    np.testing.assert_array_equal(stream.read(0, ids)[0], want)


@pytest.mark.parametrize(
    "change", [{"seed": 7}, {"seq_len": 17}, {"num_samples": 50}, {"split_name": "valid"}]
)
def test_megatron_cache_of_other_inputs_is_not_used(
    change: dict[str, Any], prefixes: dict[str, str], tmp_path: Path
) -> None:
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True)
    cfg = config_of("gpt_e3_separate", prefixes)
    cfg["sampling"] |= {"cache_dir": str(tmp_path), "split": "90,10,0"} | {
        k: v for k, v in change.items() if k in ("num_samples", "split_name")
    }
    if "split_name" not in change:
        cfg["sampling"]["split"] = "100,0,0"
    cfg |= {k: v for k, v in change.items() if k in ("seed", "seq_len")}
    stream = stream_of(cfg)
    assert stream._files is not None
    assert all("streamload-megatron" in path for path in stream._files.values())


def test_megatron_cache_with_a_wrong_hash_is_not_used(
    prefixes: dict[str, str], tmp_path: Path
) -> None:
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True)
    description = next(tmp_path.glob("*description.txt"))
    description.write_text(description.read_text().replace("1234", "1234 "))
    cfg = config_of("gpt_e3_separate", prefixes)
    cfg["sampling"]["cache_dir"] = str(tmp_path)
    stream = stream_of(cfg)
    assert stream._files is not None
    assert all("streamload-megatron" in path for path in stream._files.values())


def test_live_megatron_core_cache(prefixes: dict[str, str], tmp_path: Path) -> None:
    """megatron-core builds into a cache folder; streamload reads those very files."""
    pytest.importorskip("megatron.core")
    request = GOLDENS.epoch_requests(11)["e2_nosep"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        built = GOLDENS.build((["A"], None), "80,15,5", [request, 9, None], seq_len=11, seed=3,
                              path_to_cache=str(tmp_path))[0]  # fmt: skip
    want = np.stack([built._query_document_sample_shuffle_indices(i)[0] for i in range(request)])
    cfg = {
        "seq_len": 11,
        "seed": 3,
        "sources": [{"name": "A", "path": prefixes["A"] + ".bin"}],
        "sampling": {
            "mode": "megatron",
            "split": "80,15,5",
            "num_samples": request,
            "cache_dir": str(tmp_path),
        },
    }
    stream = stream_of(cfg)
    assert stream._files is not None
    assert all("-GPTDataset-train-" in path for path in stream._files.values())
    np.testing.assert_array_equal(stream.read(0, np.arange(request))[0], want)


def test_a_dataset_rewritten_at_the_same_size_gets_new_indices(tmp_path: Path) -> None:
    """The data fingerprint sees paths and sizes only; the indices are keyed by the sequence
    lengths too, so documents split differently in a same-size file are never read through
    the indices of the old split."""
    tokens = np.arange(1, 401, dtype=np.int32) % 97 + 1

    def write(lengths: list[int]) -> str:
        return str(write_megatron_documents(tmp_path / "data" / "doc", tokens, lengths))

    def cfg(path: str, cache: Path) -> dict[str, Any]:
        sampling = {"mode": "megatron", "num_samples": 30, "cache_dir": str(cache)}
        return {"seq_len": 16, "seed": 3, "sources": [{"name": "d", "path": path}],
                "sampling": sampling}  # fmt: skip

    path = write([100, 100, 100, 100])
    stream_of(cfg(path, tmp_path / "cache"))
    path = write([50, 150, 120, 80])  # the same 400 tokens, other documents
    ids = np.arange(30)
    cached = stream_of(cfg(path, tmp_path / "cache")).read(0, ids)[0]
    fresh = stream_of(cfg(path, tmp_path / "fresh")).read(0, ids)[0]
    np.testing.assert_array_equal(cached, fresh)
    assert len(list((tmp_path / "cache").glob("*-streamload-megatron-description.json"))) == 2


def test_a_folder_made_by_another_process_meanwhile_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ranks starting together: the folder did not exist at the first look and another rank
    made it before the second (it is a folder, not a file in the way)."""
    from streamload.util.index_cache import cache_folder

    folder = tmp_path / "cache"
    folder.mkdir()
    looks: list[bool] = []
    real = Path.is_dir

    def is_dir(self: Path) -> bool:
        looks.append(True)
        return len(looks) > 1 and real(self)  # absent at the first look, there at the next

    monkeypatch.setattr(Path, "is_dir", is_dir)
    assert cache_folder(str(folder)) == folder
    assert len(looks) >= 2
