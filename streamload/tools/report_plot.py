"""Plots of ``streamload plan``'s report (``--plot FILE``): a mixture's cumulative shares per
step, else the per-source sections of the report (an epoch's packing, the split bounds).

Which plot a config gets is decided in :func:`plot_plan`; a mode with a plot of its own
(vsl: the curriculum) is asked first by the CLI. The file type follows the suffix (PNG, SVG,
PDF), written atomically.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from streamload.errors import ConfigError
from streamload.streams.interface import SampleStream
from streamload.tools.report import cumulative_shares
from streamload.util.files import atomic_output

__all__ = ["NEEDS_MATPLOTLIB", "plot_plan", "pyplot"]

NEEDS_MATPLOTLIB = "--plot needs matplotlib: pip install 'streamload[plot]'"
"""Why ``--plot`` wrote nothing where matplotlib is missing."""


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the non-interactive backend.

    Raises:
        ConfigError: matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError(NEEDS_MATPLOTLIB) from None
    return plt


def plot_plan(stream: SampleStream, report: dict[str, Any], path: str) -> None:
    """Plot what the report holds: a mixture's shares (when it has ``phases``), else an
    epoch's packing and the split bounds of each source (one panel each).

    Raises:
        ConfigError: the report holds nothing to plot (names what would), or no matplotlib.
    """
    if "phases" in report:
        _plot_shares(stream, report["steps"], path)
        return
    panels = [key for key in ("packing", "splits") if report.get(key)]
    if not panels:
        mode = report["stream"]["mode"]
        raise ConfigError(
            f"--plot: nothing to plot for a single-source {mode} config without sampling.split "
            "(a plot shows a mixture's shares, packed/padded packing, split bounds or a vsl "
            "curriculum)"
        )
    plt = pyplot()
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.5 + 1.5 * len(panels)), squeeze=False)
    for ax, key in zip(axes[:, 0], panels, strict=True):
        (_packing_panel if key == "packing" else _split_panel)(ax, report[key])
    _save(plt, fig, path)


def _plot_shares(stream: SampleStream, steps: int, path: str) -> None:
    if steps == 0:
        raise ConfigError("--plot: --steps 0 plans no step; plot at least one")
    plt = pyplot()
    at, shares = cumulative_shares(stream, steps)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.stackplot(at, shares.T, labels=[s.name for s in stream.sources])
    for phase in stream.phases[1:]:
        if phase.start_step < steps:
            ax.axvline(phase.start_step, color="black", linestyle="--", linewidth=0.8)
    ax.set_xlabel("step")
    ax.set_ylabel("cumulative share of samples")
    ax.legend(loc="upper right")
    _save(plt, fig, path)


def _packing_panel(ax: Any, packing: dict[str, dict[str, Any]]) -> None:
    """Tokens of one epoch per source: data, padding, truncated (stacked bars)."""
    names = list(packing)
    left = np.zeros(len(names))
    for key, label in (
        ("data_tokens", "data"),
        ("padding_tokens", "padding"),
        ("truncated_tokens", "truncated"),
    ):
        values = np.array([packing[n][key] for n in names], dtype=np.float64)
        ax.barh(names, values, left=left, label=label)
        left += values
    ax.set_xlabel("tokens per epoch")
    ax.set_title("packing of one epoch")
    ax.legend(loc="lower right", fontsize="small")


def _split_panel(ax: Any, splits: dict[str, dict[str, Any]]) -> None:
    """Each source's token range of every split (stacked bars from 0 to its total)."""
    names = list(splits)
    for part in ("train", "valid", "test"):
        bounds = [splits[n]["parts"][part]["tokens"] for n in names]
        ax.barh(
            names,
            [end - begin for begin, end in bounds],
            left=[begin for begin, _ in bounds],
            label=part,
        )
    ax.set_xlabel("token offset in the source")
    ax.set_title("split bounds")
    ax.legend(loc="lower right", fontsize="small")


def _save(plt: Any, fig: Any, path: str) -> None:
    fig.tight_layout()
    fmt = os.path.splitext(path)[1].lstrip(".") or "png"
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format=fmt)
    plt.close(fig)
    print(f"wrote {path}")
