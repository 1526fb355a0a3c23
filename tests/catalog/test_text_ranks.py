"""Text caches filled by several real processes (issue 32, items 2 and 3): every rank helps,
none duplicates; a killed run resumes byte-identical; a bad file fails every process that
needs it, none hangs.

The processes run :mod:`tests.helpers.text_hooks`, whose caches log every tokenizing of a
file (``TextCache._write``, under the file's claim: what "built" means here) with the pid
that did it, so the tests count builds per file over all processes. Some hold a build on
purpose (until a second process builds too, until another waits on the claim, or asleep to
be killed mid-file), so the interleaving under test happens however busy the machine is.
Every wait has a bound (:data:`TIMEOUT`, the hooks' :data:`~tests.helpers.text_hooks.WAIT`):
a hang fails the test, and nothing asserts on durations.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

import streamload
from streamload.catalog.text_source import list_text_inputs, prepare_text_source, text_cache
from streamload.config import SourceConfig
from streamload.testing import assert_batches_equal, collect_global_batches
from streamload.tokenize.lock import try_exclusive
from streamload.tokenize.text_cache import TextCache, TextInput
from tests.catalog.test_text_source import text_config, write_corpus
from tests.helpers import gloo, text_hooks
from tests.helpers.paths import REPO
from tests.helpers.text_hooks import builds, has_waiter, wait_until
from tests.tokenize.test_tokenize_processes import children, gone_within, is_worker

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc"),
]

TIMEOUT = 180
"""Seconds any process of a test may take before it is killed and the test fails."""
STEPS = 4
"""Global batches compared with the single-process run."""


def setup(tmp_path: Path, files: int = 12, docs: int = 40) -> tuple[Path, SourceConfig]:
    """A corpus, its config (cache under ``tmp_path/cache``) as a file, and its source."""
    write_corpus(tmp_path / "in", files=files, docs=docs)
    config = text_config(tmp_path / "in", tmp_path / "cache")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    (tmp_path / "log").mkdir()
    (tmp_path / "out").mkdir()
    return path, SourceConfig(**config["sources"][0])


def hooks_arg(tmp_path: Path, **hooks: Any) -> str:
    return json.dumps({"log": str(tmp_path / "log"), **hooks})


def reference(tmp_path: Path, steps: int = STEPS) -> list[dict[str, torch.Tensor]]:
    """The single-process batches, from a cache of their own (the shared one stays empty)."""
    config = text_config(tmp_path / "in", tmp_path / "reference-cache")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the pass's last samples do not fill a batch
        return collect_global_batches([streamload.build_loader(config, batch_size=8)], steps)


def start(hooks: str, *args: object) -> subprocess.Popen[bytes]:
    """One process of :mod:`tests.helpers.text_hooks`, without a process group."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO), env.get("PYTHONPATH"))))
    cmd = [sys.executable, "-m", "tests.helpers.text_hooks", hooks, *map(str, args)]
    return subprocess.Popen(
        cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def finish(procs: list[subprocess.Popen[bytes]]) -> list[tuple[int, str]]:
    """Every process's exit code and output; all are killed when one outlives TIMEOUT."""
    ended = []
    for proc in procs:
        try:
            output, _ = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            pytest.fail(f"process {proc.args!r} did not finish in {TIMEOUT} s")
        ended.append((proc.returncode, output.decode()[-3000:]))
    return ended


def assert_built_once(tmp_path: Path, source: SourceConfig) -> dict[str, int]:
    """Every input file tokenized exactly once over all processes; its builder's pid by key."""
    cache = text_cache(source)
    keys = [cache.file_key(i) for i in list_text_inputs(source)]
    logged = builds(tmp_path / "log")
    assert Counter(b["key"] for b in logged) == Counter(keys), "a file built twice or never"
    return {b["key"]: b["pid"] for b in logged}


def assert_markers_name_their_builders(
    source: SourceConfig, markers: list[dict[str, Any]], pids: dict[str, int]
) -> None:
    """Each marker was written by the process that tokenized its file (``built`` holds its
    pid): no process rebuilt a file after another had published it."""
    cache = text_cache(source)
    for marker in markers:
        key = cache.file_key(TextInput(**marker["input"]))
        assert int(marker["built"].split("-")[1]) == pids[key]


@pytest.mark.parametrize("world", [2, 4])
def test_ranks_of_a_job_share_the_files_and_read_their_share_of_the_batches(
    tmp_path: Path, world: int
) -> None:
    config, source = setup(tmp_path)
    expected = reference(tmp_path)
    args = [hooks_arg(tmp_path, rendezvous=2), "loader", config, tmp_path / "out", "--group"]
    gloo.wait({f"{world} ranks": gloo.start(text_hooks.__file__, world, [*args, "--steps", STEPS])},
              timeout=TIMEOUT)  # fmt: skip
    pids = assert_built_once(tmp_path, source)
    assert len(set(pids.values())) > 1, "one rank built every file"
    out = tmp_path / "out"
    markers = [json.loads((out / f"markers-rank{r}.json").read_text()) for r in range(world)]
    assert all(m == markers[0] for m in markers) and len(markers[0]) == 12
    assert_markers_name_their_builders(source, markers[0], pids)
    per_rank = [torch.load(out / f"batches-rank{r}.pt") for r in range(world)]
    assert_batches_equal(expected, collect_global_batches(per_rank), f"{world} ranks")


def test_processes_without_a_group_share_the_files_through_locks(tmp_path: Path) -> None:
    config, source = setup(tmp_path)
    expected = reference(tmp_path)
    hooks = hooks_arg(tmp_path, rendezvous=2)
    procs = [start(hooks, "loader", config, tmp_path / "out") for _ in range(3)]
    for code, output in finish(procs):
        assert code == 0, output
    pids = assert_built_once(tmp_path, source)
    assert len(set(pids.values())) > 1
    names = [f"pid{p.pid}" for p in procs]
    markers = [json.loads((tmp_path / "out" / f"markers-{n}.json").read_text()) for n in names]
    assert all(m == markers[0] for m in markers)
    assert_markers_name_their_builders(source, markers[0], pids)
    catalogs = [json.loads((tmp_path / "out" / f"catalog-{n}.json").read_text()) for n in names]
    assert all(c == catalogs[0] for c in catalogs) and len(catalogs[0]["paths"]) == 12
    for name in names:
        assert_batches_equal(expected, torch.load(tmp_path / "out" / f"batches-{name}.pt"), name)


def with_big_file(tmp_path: Path) -> tuple[Path, SourceConfig, str]:
    """A corpus of 4 small files and ``part_big.jsonl`` (3,000 documents: a build of several
    batches); the config, the source and the big file's key."""
    config, source = setup(tmp_path, files=4)
    write_corpus(tmp_path / "big", files=1, docs=3000, seed=5)
    os.replace(tmp_path / "big" / "part_0.jsonl", tmp_path / "in" / "part_big.jsonl")
    big = next(i for i in list_text_inputs(source) if i.relpath == "part_big.jsonl")
    return config, source, text_cache(source).file_key(big)


def wait_for_stall(proc: subprocess.Popen[bytes], log: Path) -> None:
    found = wait_until(lambda: proc.poll() is not None or any(log.glob("stalled-*")))
    if not found or proc.poll() is not None:
        proc.kill()
        output = proc.communicate()[0].decode()[-3000:]
        pytest.fail(
            f"the run never reached the big file's first batch (exit {proc.poll()}):\n{output}"
        )


def assert_nothing_published(cache: TextCache, key: str) -> None:
    names = os.listdir(cache.folder)
    assert not [n for n in names if n.startswith(key)], "a killed build published something"
    staged = [e for e in os.listdir(cache.path(".staging")) if e.startswith(f".{key}.")]
    assert staged, "the kill did not land mid-build"
    with try_exclusive(cache.path(f".locks/{key}"), blocking=False) as free:
        assert free, "the killed run's claim is still held"


def assert_same_as_a_clean_build(tmp_path: Path, source: SourceConfig) -> None:
    """Every cache file of ``source`` equals that of a build into a fresh folder (markers but
    for which build wrote them), and no staging is left."""
    clean = SourceConfig(**text_config(tmp_path / "in", tmp_path / "clean")["sources"][0])
    prepare_text_source(clean)
    here, there = text_cache(source).folder, text_cache(clean).folder
    files = sorted(n for n in os.listdir(there) if os.path.isfile(os.path.join(there, n)))
    assert sorted(n for n in os.listdir(here) if os.path.isfile(os.path.join(here, n))) == files
    for name in files:
        a, b = Path(here, name).read_bytes(), Path(there, name).read_bytes()
        if name.endswith(".json") and name != "settings.json":
            a, b = (json.loads(x) for x in (a, b))
            a.pop("built"), b.pop("built")
        assert a == b, name
    assert os.listdir(os.path.join(here, ".staging")) == []


def test_a_run_killed_mid_file_publishes_nothing_and_a_rerun_is_byte_identical(
    tmp_path: Path,
) -> None:
    config, source, key = with_big_file(tmp_path)
    proc = start(hooks_arg(tmp_path, stall="part_big.jsonl"), "prepare", config)
    wait_for_stall(proc, tmp_path / "log")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    cache = text_cache(source)
    assert_nothing_published(cache, key)
    report = prepare_text_source(source)
    assert report.built == 5 - sum(1 for b in builds(tmp_path / "log") if b["key"] != key)
    assert_same_as_a_clean_build(tmp_path, source)


def test_a_killed_prepare_takes_its_pool_along_and_publishes_nothing_half(tmp_path: Path) -> None:
    config, source, key = with_big_file(tmp_path)
    proc = start(hooks_arg(tmp_path, stall="part_big.jsonl"), "prepare", config, "--processes", 2)
    wait_for_stall(proc, tmp_path / "log")
    workers = [pid for pid in children(proc.pid) if is_worker(pid)]
    stalled = [int(p.name.split("-")[1]) for p in (tmp_path / "log").glob("stalled-*")]
    assert workers and set(stalled) <= set(workers)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert gone_within(workers, 10) == [], "pool workers outlived the killed prepare"
    cache = text_cache(source)
    assert_nothing_published(cache, key)
    for item in list_text_inputs(source):  # a marker there is a whole file
        if os.path.exists(cache.path(cache.file_key(item) + ".json")):
            assert cache.marker(item) is not None
    prepare_text_source(source)
    assert_same_as_a_clean_build(tmp_path, source)


def test_a_bad_file_fails_its_builder_and_the_rank_waiting_on_it(tmp_path: Path) -> None:
    config, _ = setup(tmp_path, files=3)
    lines = [json.dumps({"text": f"document {n}"}) for n in range(40)]
    (tmp_path / "in" / "a_bad.jsonl").write_text("\n".join([*lines, "{not json"]) + "\n")
    hooks = hooks_arg(tmp_path, hold_for_waiter="a_bad.jsonl")  # held until rank 1 waits on it
    procs = gloo.start(
        text_hooks.__file__, 2, [hooks, "loader", config, tmp_path / "out", "--group"]
    )
    ended = finish(procs)
    assert [code for code, _ in ended] == [3, 3], ended
    messages = [(tmp_path / "out" / f"error-rank{r}.txt").read_text() for r in range(2)]
    assert messages[0] == messages[1]
    assert "a_bad.jsonl: line 41 is not valid JSON" in messages[0]
    # its owner, or the other rank if it stole the file first; either way read once
    bad = [b["pid"] for b in builds(tmp_path / "log") if b["relpath"] == "a_bad.jsonl"]
    assert len(bad) == 1 and bad[0] in (p.pid for p in procs), "the waiter read it again"


def test_a_pool_waits_on_a_claim_only_after_releasing_its_own(tmp_path: Path) -> None:
    """A process with a pool used to wait on another's claim while holding the claim of a
    build its pool had finished: two such processes could wait on each other forever."""
    config, source = setup(tmp_path, files=2)
    cache = text_cache(source)
    inputs = list_text_inputs(source)
    owner = [0, 1] if inputs[0].size >= inputs[1].size else [1, 0]
    mine, theirs = (cache.path(f".locks/{cache.file_key(inputs[owner.index(r)])}") for r in (0, 1))
    args = ["prepare", config, "--rank", 0, "--world-size", 2, "--processes", 2]
    with try_exclusive(theirs, blocking=False) as held:  # rank 1 is building its file
        assert held
        proc = start(hooks_arg(tmp_path), *args)
        waited = wait_until(lambda: has_waiter(theirs) or proc.poll() is not None)
        with try_exclusive(mine, blocking=False) as free:
            pass
    code, output = finish([proc])[0]  # rank 1's claim dropped: rank 0 builds that file too
    assert waited and code == 0, output
    assert free, "rank 0 waited on rank 1's claim while holding its own"
    assert_built_once(tmp_path, source)


def test_a_bad_file_stops_a_prepares_pool_at_once(tmp_path: Path) -> None:
    """A worker failing on a bad row ends the run: the worker still tokenizing another file
    is killed (it used to finish, keeping the process alive), nothing of it is published."""
    config, source = setup(tmp_path, files=2)
    write_corpus(tmp_path / "big", files=1, docs=3000, seed=5)
    os.replace(tmp_path / "big" / "part_0.jsonl", tmp_path / "in" / "a_big.jsonl")
    (tmp_path / "in" / "b_bad.jsonl").write_text('{"text": "fine"}\n{not json\n')
    proc = start(hooks_arg(tmp_path, stall="a_big.jsonl"), "prepare", config, "--processes", 2)
    code, output = finish([proc])[0]
    assert code == 2 and "b_bad.jsonl: line 2 is not valid JSON" in output, output
    assert (
        gone_within([int(p.name.split("-")[1]) for p in (tmp_path / "log").glob("stalled-*")], 10)
        == []
    )
    cache = text_cache(source)
    big = next(i for i in list_text_inputs(source) if i.relpath == "a_big.jsonl")
    assert not [n for n in os.listdir(cache.folder) if n.startswith(cache.file_key(big))]


def test_a_killed_pool_worker_fails_the_prepare_with_a_reason(tmp_path: Path) -> None:
    """A worker killed mid-file (the OOM killer) ends ``prepare`` with one line, not a
    traceback of the executor, and its file stays unpublished."""
    config, source, key = with_big_file(tmp_path)
    proc = start(hooks_arg(tmp_path, stall="part_big.jsonl"), "prepare", config, "--processes", 2)
    wait_for_stall(proc, tmp_path / "log")
    for flag in (tmp_path / "log").glob("stalled-*"):
        os.kill(int(flag.name.split("-")[1]), signal.SIGKILL)
    code, output = finish([proc])[0]
    assert code == 2, output
    assert "streamload prepare: error: " in output and "a tokenizing worker process died" in output
    assert "Traceback" not in output
    assert_nothing_published(text_cache(source), key)
