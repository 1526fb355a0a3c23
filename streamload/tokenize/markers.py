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
* ``staging/group-{G}/`` — files being written; removed on restart. With
  ``--work-dir.output W`` they go to ``W/streamload-tokenize-{digest}/group-{G}/`` instead,
  ``digest`` naming the destination, so runs into two destinations can share one scratch
  folder.
* ``lock-{S}`` and ``run.lock`` — :mod:`streamload.tokenize.lock`.

A group is published only as the files its writers reported: one missing from the staging
folder, or one there that no writer made, is an error, never skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from typing import Any

from streamload.errors import ConfigError, FormatError
from streamload.tokenize.lock import exclusive
from streamload.util.files import atomic_output, remove_stale_temps

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
        if work_dir is None:
            self.staging_root = os.path.join(self.root, "staging")
        else:  # a scratch folder may serve several destinations: one subfolder each
            digest = hashlib.sha256(os.path.abspath(destination).encode()).hexdigest()[:16]
            self.staging_root = os.path.join(work_dir, f"streamload-tokenize-{digest}")

    def claim(self, record: dict[str, Any]) -> None:
        """Write ``run.json``, or check that the existing one is the same run (one machine at
        a time: shards starting together all check the record the first one wrote).

        Raises:
            ConfigError: the destination holds a run with other arguments, or an unreadable
                record.
        """
        path = os.path.join(self.root, "run.json")
        with exclusive(os.path.join(self.root, "run.lock")):
            if not os.path.isfile(path):
                os.makedirs(os.path.join(self.root, "done"), exist_ok=True)
                _write_json(path, record)
                return
            old = _read_record(path)
        # the destination is the folder holding this record, not a property of the output
        # (earlier versions recorded it, as the user spelled it: ignored so those resume)
        if isinstance(old.get("config"), dict):
            old["config"] = {k: v for k, v in old["config"].items() if k != "destination"}
        for key in sorted(set(old) | set(record)):
            if old.get(key) != record.get(key):
                raise ConfigError(
                    f"{self.destination}: holds a tokenize run whose {key} is "
                    f"{_short(old.get(key))}, not {_short(record.get(key))}; restart with the "
                    "same arguments or use another destination"
                )

    def make_staging_root(self) -> None:
        """Create the staging root now, so an unusable ``--work-dir.output`` fails the run
        before any work.

        Raises:
            ConfigError: it cannot be created (a file is in the way, no permission).
        """
        try:
            os.makedirs(self.staging_root, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"{self.staging_root}: cannot create the staging folder ({exc}); "
                "--work-dir.output must be a folder this user can write"
            ) from exc

    def remove_stale_temps(self) -> None:
        """Remove temporary files that killed runs left in the destination and ``done/``
        (only those whose writer is provably gone: :func:`remove_stale_temps`)."""
        remove_stale_temps(self.destination)
        remove_stale_temps(os.path.join(self.root, "done"))

    def _marker(self, group: int) -> str:
        return os.path.join(self.root, "done", f"{group}.json")

    def done(self, group: int, *, repair: bool = True) -> dict[str, Any] | None:
        """The marker of a finished group whose files are all in place, else ``None``
        (a marker that is unreadable, or whose files vanished or changed, is deleted when
        ``repair``: the group is redone)."""
        path = self._marker(group)
        if not os.path.isfile(path):
            return None
        marker = _read_marker(path)
        files = marker.get("files") if marker is not None else None
        intact = isinstance(files, dict) and all(
            isinstance(name, str)
            and os.path.isfile(file := os.path.join(self.destination, name))
            and os.path.getsize(file) == size
            for name, size in files.items()
        )
        if not intact:
            if repair:
                os.unlink(path)
            return None
        return marker

    def staging(self, group: int) -> str:
        """The (emptied) staging folder of a group."""
        folder = os.path.join(self.staging_root, f"group-{group}")
        if os.path.isdir(folder):
            shutil.rmtree(folder)
        os.makedirs(folder)
        return folder

    def finish(
        self, group: int, staging: str, names: Sequence[str], stats: dict[str, Any]
    ) -> dict[str, Any]:
        """Move a group's files into the destination, then write its marker.

        Args:
            group: The group.
            staging: Its staging folder.
            names: The files its writers reported, all of which must be there; moved in
                this order (each part's token file after its companions and loss mask, so
                a listing never sees a token file without them).
            stats: Counts for the marker.

        Raises:
            FormatError: a reported file is missing, or the folder holds one nobody
                reported (nothing is moved then).
        """
        expected = set(names)
        for name in sorted(os.listdir(staging)):
            if not name.startswith(".") and name not in expected:
                raise FormatError(
                    f"{os.path.join(staging, name)}: not written by this run's writers for "
                    f"group {group}; was the staging folder shared with another run?"
                )
        files = {}
        for name in dict.fromkeys(names):
            src = os.path.join(staging, name)
            if not os.path.isfile(src):
                raise FormatError(
                    f"{src}: group {group}'s writer reported this file but it is missing; "
                    "was the staging folder removed by another run? Run again to redo the group"
                )
            files[name] = os.path.getsize(src)
        for name in files:
            _move_atomic(os.path.join(staging, name), os.path.join(self.destination, name))
        shutil.rmtree(staging, ignore_errors=True)
        marker = {**stats, "group": group, "files": files}
        _write_json(self._marker(group), marker)
        return marker


def _read_record(path: str) -> dict[str, Any]:
    """``run.json``, or a ConfigError saying how to start over."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        data = exc
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: not a tokenize run record ({data}); it was damaged or written by "
            f"another tool: remove {os.path.dirname(path)} to start the run over"
        )
    return data


def _read_marker(path: str) -> dict[str, Any] | None:
    """A done marker, or ``None`` when it is unreadable (the group is redone)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _move_atomic(src: str, dst: str) -> None:
    """Move ``src`` to ``dst``; across file systems (``--work-dir.output`` elsewhere) copy to a
    hidden temp name beside ``dst`` first, so ``dst`` is never a partial file."""
    try:
        os.replace(src, dst)
    except OSError:  # EXDEV: another file system
        with atomic_output(dst) as tmp:
            shutil.copyfile(src, tmp)
        os.unlink(src)


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."
