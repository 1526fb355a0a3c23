"""Exceptions raised in a worker process, carried to the training process intact or named."""

from __future__ import annotations

import contextlib
import pickle
import traceback
from dataclasses import dataclass
from typing import Any

from streamload.errors import WorkerError, add_note


@dataclass(frozen=True)
class _Failure:
    """A picklable summary of an exception raised in a worker process.

    An exception object may not survive pickling (an attribute holds a lock, ``__init__``
    takes other arguments than ``args``…); sending it as is would fail in the queue's feeder
    thread and the consumer would wait forever. The summary always pickles.
    """

    type_name: str
    message: str
    traceback: str
    original: bytes | None  # the pickled exception, when it survives a round trip

    @classmethod
    def of(cls, exc: BaseException) -> _Failure:
        kind = type(exc)
        original: bytes | None
        try:
            original = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
            pickle.loads(original)
        except Exception:  # any failure means: send the summary only
            original = None
        try:
            message = str(exc)
        except Exception:
            message = f"<{kind.__name__} whose str() fails>"
        text = "".join(traceback.format_exception(kind, exc, exc.__traceback__))
        return cls(f"{kind.__module__}.{kind.__qualname__}", message, text, original)

    def rebuild(self, worker: str) -> BaseException:
        """The original exception when it unpickles, else a :class:`WorkerError`."""
        exc: Any = None
        if self.original is not None:
            with contextlib.suppress(Exception):
                exc = pickle.loads(self.original)
        if not isinstance(exc, BaseException):
            exc = WorkerError(
                f"loader worker {worker}: the map function raised {self.type_name}: "
                f"{self.message} (re-raised as WorkerError: the exception does not pickle)"
            )
        add_note(exc, f"traceback in loader worker {worker}:\n{self.traceback.rstrip()}")
        return exc
