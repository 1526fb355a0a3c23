"""Resumable runs: the run record and one done marker per finished group.

Everything lives in ``{destination}/.streamload-tokenize/`` (hidden, so no listing takes it
for data):

* ``run.json`` — what decides the output bytes (:meth:`TokenizeConfig.output_key`, the
  expanded input files, the tokenizer's sha256, the dtype and the group count). A restart
  with other values is refused, naming the first difference, so two runs never mix in one
  destination.
* ``done/{G}.json`` — written (atomically) after all of group ``G``'s files were moved into
  the destination; it lists them with their sizes. A group without a marker is redone from
  scratch; its earlier files are overwritten with the same bytes (the shuffle is seeded), so
  nothing is duplicated. A marker whose files are missing or resized is discarded and the
  group redone.
* ``staging/group-{G}/`` — files being written (or ``--work-dir.output``); removed on restart.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from typing import Any

from streamload.errors import ConfigError
from streamload.util.files import atomic_output, publish, temp_beside

__all__ = ["RunRecord"]

META_DIR = ".streamload-tokenize"


def _write_json(path: str, data: Any) -> None:
    with atomic_output(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)


class RunRecord:
    """The bookkeeping folder of one destination.

    Args:
        destination: The output folder.
        work_dir: Scratch folder for staging (default: inside the bookkeeping folder).
    """

    def __init__(self, destination: str, work_dir: str | None = None) -> None:
        self.destination = destination
        self.root = os.path.join(destination, META_DIR)
        self.staging_root = work_dir or os.path.join(self.root, "staging")

    def claim(self, record: dict[str, Any]) -> None:
        """Write ``run.json``, or check that the existing one is the same run.

        Raises:
            ConfigError: the destination holds a run with other arguments.
        """
        path = os.path.join(self.root, "run.json")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as fh:
                old = json.load(fh)
            for key in sorted(set(old) | set(record)):
                if old.get(key) != record.get(key):
                    raise ConfigError(
                        f"{self.destination}: holds a tokenize run whose {key} is "
                        f"{_short(old.get(key))}, not {_short(record.get(key))}; restart with the "
                        "same arguments or use another destination"
                    )
            return
        os.makedirs(os.path.join(self.root, "done"), exist_ok=True)
        _write_json(path, record)

    def _marker(self, group: int) -> str:
        return os.path.join(self.root, "done", f"{group}.json")

    def done(self, group: int, *, repair: bool = True) -> dict[str, Any] | None:
        """The marker of a finished group whose files are all in place, else ``None``
        (a marker whose files vanished or changed is deleted when ``repair``)."""
        path = self._marker(group)
        if not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8") as fh:
            marker: dict[str, Any] = json.load(fh)
        for name, size in marker["files"].items():
            file = os.path.join(self.destination, name)
            if not os.path.isfile(file) or os.path.getsize(file) != size:
                if repair:
                    os.unlink(path)  # an output vanished or changed: redo the group
                return None
        return marker

    def staging(self, group: int) -> str:
        """The (emptied) staging folder of a group."""
        folder = os.path.join(self.staging_root, f"group-{group}")
        if os.path.isdir(folder):
            shutil.rmtree(folder)
        os.makedirs(folder)
        return folder

    def finish(self, group: int, staging: str, stats: dict[str, Any]) -> dict[str, Any]:
        """Move a group's files into the destination, then write its marker."""
        files = {}
        for name in sorted(os.listdir(staging)):
            if name.startswith("."):
                continue  # a writer's temporary file (none after a clean close)
            src = os.path.join(staging, name)
            files[name] = os.path.getsize(src)
            _move_atomic(src, os.path.join(self.destination, name))
        shutil.rmtree(staging, ignore_errors=True)
        marker = {**stats, "group": group, "files": files}
        _write_json(self._marker(group), marker)
        return marker


def _move_atomic(src: str, dst: str) -> None:
    """Move ``src`` to ``dst``; across file systems (``--work-dir.output`` elsewhere) copy to a
    hidden temp name beside ``dst`` first, so ``dst`` is never a partial file."""
    try:
        os.replace(src, dst)
    except OSError:  # EXDEV: another file system
        tmp = temp_beside(dst)
        try:
            shutil.copyfile(src, tmp)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        publish(tmp, dst)
        os.unlink(src)


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."
