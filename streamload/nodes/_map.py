"""A stateless map stage: applies a function to each item and passes the source's state on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from torchdata.nodes import BaseNode

__all__ = ["MapStage"]

X = TypeVar("X")
Y = TypeVar("Y")


class MapStage(BaseNode[Y], Generic[X, Y]):
    """Apply ``fn`` to every item of ``source``; the state is the source's state.

    State:
        Exactly ``source.state_dict()`` (this stage holds nothing).
    """

    def __init__(self, source: BaseNode[X], fn: Callable[[X], Y]) -> None:
        super().__init__()
        self.source = source
        self.fn = fn

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.source.reset(initial_state)

    def next(self) -> Y:
        return self.fn(next(self.source))

    def get_state(self) -> dict[str, Any]:
        return self.source.state_dict()
