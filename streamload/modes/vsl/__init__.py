"""``sampling.mode = "vsl"``: variable sequence lengths, pieces of documents of power-of-two
lengths ordered by a curriculum (docs/vsl.md): a source's pieces (:mod:`.plan_cache`,
:mod:`.source`), the stream (:mod:`.stream`, :mod:`.draws`) and its report (:mod:`.report`).
Its ``[sampling]`` keys: :mod:`.options`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streamload.modes.base import ModeSpec, SamplesRequest
from streamload.modes.vsl.options import VslOptions, check_vsl_sampling

if TYPE_CHECKING:
    from streamload.config import DataConfig
    from streamload.streams.interface import SampleStream

__all__ = ["MODE"]


def _check(config: DataConfig) -> None:
    from streamload.modes.vsl.options import check_vsl_config

    check_vsl_config(config)


def _build(config: DataConfig) -> SampleStream:
    from streamload.modes.vsl.stream import VslStream

    return VslStream.from_config(config)


def _batch_size(config: DataConfig, batch_size: int | None, world_size: int) -> int:
    from streamload.modes.vsl.options import vsl_batch_size

    return vsl_batch_size(config, batch_size, world_size)


def _plan_report(stream: Any, steps: int | None) -> dict[str, Any]:
    from streamload.modes.vsl.report import vsl_report

    return {"vsl": vsl_report(stream)}


def _plan_lines(report: dict[str, Any]) -> list[str]:
    from streamload.modes.vsl.report import report_lines

    return report_lines(report["vsl"])


def _plot(stream: Any, path: str) -> bool:
    from streamload.modes.vsl.report import plot_curriculum

    return plot_curriculum(stream, path)


def _write_samples(stream: Any, request: SamplesRequest) -> str:
    from streamload.modes.vsl.report import write_samples

    return write_samples(stream, request)


MODE = ModeSpec(
    name="vsl",
    build=_build,
    options=VslOptions,
    check_sampling=check_vsl_sampling,
    uses_cache_dir=True,
    check=_check,
    derive_batch_size=_batch_size,
    no_evaluation=(
        "an evaluation pass has no curriculum; evaluate the same split with mode = 'packed' "
        "or 'concat' (docs/sampling.md)"
    ),
    plan_report=_plan_report,
    plan_lines=_plan_lines,
    plot=_plot,
    mixture_report=False,
    write_samples=_write_samples,
)
"""The vsl mode's plug-in: its plan report covers the mixture per length; ``samples``
writes steps (each its own length) into a ``.npz``."""
