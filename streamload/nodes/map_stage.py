"""A stateless map stage: applies a function to each item and passes the source's state on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from torchdata.nodes import BaseNode

__all__ = ["MapStage", "unwrap_legacy_state"]

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


_LEGACY_KEY = "source"


def unwrap_legacy_state(source: BaseNode[Any], state: dict[str, Any]) -> dict[str, Any]:
    """The source's state from a map stage's saved state, old or new shape.

    Map stages pass their source's state through. ``MapWorkers`` once wrapped it as
    ``{"source": <source state>}``; such a state is recognised by comparing its shape (the
    nested keys) with the shape of the source's own state, so a source whose state is itself
    ``{"source": …}`` (torchdata's ``Batcher``) is never unwrapped by mistake.
    """
    if set(state) != {_LEGACY_KEY} or not isinstance(state[_LEGACY_KEY], dict):
        return state
    source.reset(None)  # its fresh state shows the shape; reset again by the caller
    shape = _shape(source.state_dict())
    if _shape(state) != shape and _shape(state[_LEGACY_KEY]) == shape:
        return state[_LEGACY_KEY]
    return state


def _shape(state: Any) -> Any:
    """Nested dict keys of a state (leaves are ``None``)."""
    if isinstance(state, dict):
        return {key: _shape(value) for key, value in state.items()}
    return None
