"""The context-manager life of a format writer whose temporary outputs sit on an exit stack."""

from __future__ import annotations

from typing import Any, TypeVar

__all__ = ["StackWriter"]

_W = TypeVar("_W", bound="StackWriter")


class StackWriter:
    """The context-manager life of a writer whose temporary outputs sit in ``self._stack``.

    On success ``close()`` finishes and renames the outputs; on an exception inside the block
    the stack unwinds, deleting the temporary files, and nothing looks complete.
    """

    _closed: bool
    _stack: Any  # a contextlib.ExitStack of the temporary outputs (None before any)

    def close(self) -> None:  # pragma: no cover - every writer defines it
        raise NotImplementedError

    def __enter__(self: _W) -> _W:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        elif not self._closed:
            self._closed = True
            if self._stack is not None:
                self._stack.__exit__(exc_type, exc, tb)
