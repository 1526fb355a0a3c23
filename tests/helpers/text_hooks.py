"""Processes of the text-cache tests (tests/catalog/test_text_ranks.py) and their hooks.

Usage (from the repository root, ``PYTHONPATH`` holding it)::

    python -m tests.helpers.text_hooks HOOKS loader CONFIG OUT [--group] [--steps N]
    python -m tests.helpers.text_hooks HOOKS prepare CONFIG [streamload prepare options]

``HOOKS`` is a JSON object (:class:`Hooks`). Every text cache the process makes is a
:class:`HookedCache`, whose tokenizing of a file (``TextCache._write``, under the file's
claim) is logged and may be held:

* ``log``: a folder; each build appends ``{"key", "relpath", "pid"}`` to
  ``builds-<pid>.jsonl`` there, so the test counts the builds of every file over all
  processes (a file tokenized twice shows twice).
* ``rendezvous``: the first build of each process waits (up to :data:`WAIT` seconds) until
  that many processes have started one, so the processes overlap however busy the machine is.
* ``stall``: the build of the file with this relpath writes ``stalled-<pid>`` in ``log``
  after its first batch of documents, then sleeps: the test kills the process mid-build.
* ``hold_for_waiter``: the build of the file with this relpath waits until another
  process waits on its claim (a blocked ``flock`` in ``/proc/locks``), then goes on.

Worker processes of a pool get the hooks too: the cache is pickled with them, and
unpickling imports this module. ``loader`` builds a loader (under a gloo process group with
``--group``), saves its first batches to ``OUT/batches-<rank or pid>.pt`` and the markers to
``OUT/markers-<…>.json``, its catalog's fingerprint, shard paths and token counts to
``OUT/catalog-<…>.json``; a :class:`~streamload.errors.StreamloadError` is written to
``OUT/error-<…>.txt`` and the process exits 3. ``prepare`` runs ``streamload prepare``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, TypedDict

from streamload.tokenize.text_cache import TextCache, TextInput

WAIT = 60.0
"""Seconds a hook waits for other processes before going on (a hang guard, not a timing)."""
STALL = 600.0
"""Seconds a stalled build sleeps (the test kills it long before)."""


class Hooks(TypedDict, total=False):
    """What :class:`HookedCache` does (module docstring)."""

    log: str
    rendezvous: int
    stall: str
    hold_for_waiter: str


HOOKS: dict[str, Any] = {}
"""The hooks of this process's caches (:class:`Hooks`; set by :func:`install`)."""


class HookedCache(TextCache):
    """A :class:`TextCache` whose builds are logged and may be held (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hooks: dict[str, Any] = dict(HOOKS)  # an attribute: pickled to pool workers

    def _write(self, item: TextInput, key: str, staging: str, progress: Any) -> dict[str, Any]:
        log = Path(self.hooks.get("log", "."))
        if "log" in self.hooks:
            line = json.dumps({"key": key, "relpath": item.relpath, "pid": os.getpid()})
            with open(log / f"builds-{os.getpid()}.jsonl", "a") as fh:
                fh.write(line + "\n")
        if self.hooks.get("rendezvous"):
            (log / f"started-{os.getpid()}").touch()
            wait_until(lambda: len(list(log.glob("started-*"))) >= self.hooks["rendezvous"])
        if item.relpath == self.hooks.get("hold_for_waiter"):
            wait_until(lambda: has_waiter(self.path(f".locks/{key}")))
        if item.relpath == self.hooks.get("stall"):
            progress = stalling(progress, log / f"stalled-{os.getpid()}")
        return super()._write(item, key, staging, progress)


def stalling(progress: Any, flag: Path) -> Any:
    """A progress callback that, at its first call, writes ``flag`` and sleeps."""

    def call(documents: int, tokens: int) -> None:
        if progress is not None:
            progress(documents, tokens)
        flag.touch()
        time.sleep(STALL)

    return call


def wait_until(condition: Any) -> bool:
    """Poll ``condition`` until it holds or :data:`WAIT` seconds pass; whether it held."""
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def has_waiter(path: str) -> bool:
    """Whether a process is blocked on an ``flock`` of ``path`` (``/proc/locks``: a
    ``->`` line naming the file's inode)."""
    try:
        inode = str(os.stat(path).st_ino)
        with open("/proc/locks", encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return False
    return any("->" in line and line.split()[-3].rsplit(":", 1)[-1] == inode for line in lines)


def builds(log: Path) -> list[dict[str, Any]]:
    """Every logged build, over all processes."""
    return [json.loads(line) for p in sorted(log.glob("builds-*.jsonl")) for line in open(p)]


def install(hooks: Hooks) -> None:
    """Make every text cache of this process a :class:`HookedCache` with ``hooks``."""
    from streamload.catalog import text_source

    HOOKS.clear()
    HOOKS.update(hooks)
    text_source.TextCache = HookedCache  # type: ignore[misc]


def loader(config: str, out: str, group: bool, steps: int) -> int:
    """Build a loader on ``config`` (every rank of a gloo group with ``group``); save its
    first ``steps`` batches and the cache's markers. Returns the exit code."""
    import torch
    import torch.distributed as dist

    import streamload
    from streamload.catalog.sources import describe_sources
    from streamload.catalog.text_source import prepare_text_source
    from streamload.config import load_config
    from streamload.errors import StreamloadError

    if group:
        dist.init_process_group("gloo", init_method="env://")
    rank, world = (dist.get_rank(), dist.get_world_size()) if group else (0, 1)
    name = f"rank{rank}" if group else f"pid{os.getpid()}"
    try:
        built = streamload.build_loader(config, batch_size=8 // world)
        batches = []
        for batch in built:
            batches.append({k: v.clone() for k, v in batch.items()})
            if len(batches) == steps:
                break
        built.close()
        data = load_config(config)
        report = prepare_text_source(data.sources[0])  # done: reads the markers
        catalog = describe_sources(data)[0]
    except StreamloadError as exc:
        Path(out, f"error-{name}.txt").write_text(str(exc))
        return 3
    torch.save(batches, Path(out, f"batches-{name}.pt"))
    Path(out, f"markers-{name}.json").write_text(json.dumps(report.markers))
    described = {"fingerprint": catalog.fingerprint(), "paths": [s.path for s in catalog.shards],
                 "tokens": catalog.shards.num_tokens.tolist()}  # fmt: skip
    Path(out, f"catalog-{name}.json").write_text(json.dumps(described))
    if group:
        dist.destroy_process_group()
    return 0


def main(argv: list[str]) -> int:
    install(json.loads(argv[0]))
    if argv[1] == "prepare":
        from streamload.cli.main import main as cli

        return cli(argv[1:])
    steps = int(argv[argv.index("--steps") + 1]) if "--steps" in argv else 4
    return loader(argv[2], argv[3], "--group" in argv, steps)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
