"""The life of a writer whose output is one folder of files (MDS, LitData, Parquet files),
published whole when it is complete.

The files are written into the folder's final name inside a hidden staging folder beside
it (:func:`streamload.util.files.staged_output`), which :meth:`FolderWriter.close` moves into
place by one rename after the writer's last files (:meth:`FolderWriter._finish`); an
exception inside the ``with`` block, or in ``_finish``, removes everything. The destination
must not exist, or be an empty folder.
"""

from __future__ import annotations

import contextlib
import os
import sys

from streamload.formats._stack_writer import StackWriter
from streamload.util.files import staged_output

__all__ = ["FolderWriter"]


class FolderWriter(StackWriter):
    """Base of the folder writers: :meth:`_open_folder` in ``__init__``, :meth:`_finish` to
    write what remains at close.

    Attributes:
        folder: The destination folder, as given.
    """

    folder: str

    def _open_folder(self, folder: str | os.PathLike[str]) -> str:
        """Start the staged output of ``folder``; returns the folder to write the files in.

        Raises:
            ConfigError: the destination exists (and is not an empty folder) or cannot be
                written.
        """
        self.folder = os.fspath(folder)
        self._closed = False
        with contextlib.ExitStack() as stack:
            staging = stack.enter_context(staged_output(self.folder))
            inner = os.path.join(staging, os.path.basename(os.path.abspath(self.folder)))
            os.mkdir(inner)
            self._stack = stack.pop_all()
        return inner

    def _finish(self) -> None:  # pragma: no cover - every writer defines it
        raise NotImplementedError

    def close(self) -> None:
        """Write the last files and publish the folder (on a failure, nothing)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._finish()
        except BaseException:
            self._stack.__exit__(*sys.exc_info())
            raise
        self._stack.close()
