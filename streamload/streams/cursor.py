"""A position in the global sample stream: a value, saved in the loader state."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamload.plan.mixture import MixtureCursor

__all__ = ["StreamCursor"]


@dataclass(frozen=True)
class StreamCursor:
    """Position in the stream after some delivered batches.

    Args:
        pass_index: Current pass.
        sample: Pass-relative samples consumed.
        mixture: Per-source counts and schedule position (mixtures only).
    """

    pass_index: int
    sample: int
    mixture: MixtureCursor | None = None

    def to_state(self) -> dict[str, Any]:
        """Plain ints and lists."""
        m = self.mixture
        mixture = None if m is None else {
            "step": m.step, "drawn": list(m.drawn),
            "phase_step": m.phase_step, "phase_drawn": list(m.phase_drawn),
        }  # fmt: skip
        return {"pass": self.pass_index, "sample": self.sample, "mixture": mixture}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> StreamCursor:
        """Inverse of :meth:`to_state`."""
        m = state.get("mixture")
        mixture = None if m is None else MixtureCursor(
            int(m["step"]), tuple(m["drawn"]), int(m["phase_step"]), tuple(m["phase_drawn"])
        )  # fmt: skip
        return cls(int(state["pass"]), int(state["sample"]), mixture)
