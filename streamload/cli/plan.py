"""``streamload plan``: the realized mixture per phase and per source epoch, from the plan alone."""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from streamload.config import load_config
from streamload.streams.interface import SampleStream
from streamload.tools.report import batch_source_counts, mixture_report

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser("plan", help="show the realized mixture of the first N steps")
    p.add_argument(
        "config", help="TOML/YAML/JSON data config (a mixture; packed/padded: also the packing)"
    )
    p.add_argument("--steps", type=int, required=True, help="global steps to plan")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--plot", metavar="FILE.png", help="plot cumulative shares (needs matplotlib)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the report; returns the exit code."""
    stream = SampleStream.from_config(load_config(args.config))
    packing = {s.name: s.packing_report() for s in stream.sources if hasattr(s, "packing_report")}
    # packed and padded modes: what an epoch of each source holds (any config); the mixture
    # part needs a mixture
    report: dict[str, Any] = {"packing": packing} if packing else {}
    if stream.is_mixture or not packing:
        report.update(mixture_report(stream, args.steps))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report)
    if args.plot and stream.is_mixture:
        _plot(stream, args.steps, args.plot)
    return 0


def _print(report: dict[str, Any]) -> None:
    if "steps" in report:
        print(f"{report['steps']} steps of {report['global_batch_size']} samples")
    for phase in report.get("phases", []):
        print(
            f"phase steps [{phase['start_step']}, {phase['end_step']}): "
            f"max per-batch deviation {phase['max_batch_deviation']:.2f} samples"
        )
        for name, weight in phase["weights"].items():
            print(f"  {name:<16} target {weight:8.4f}  realized {phase['realized'][name]:8.4f}")
    for name, info in report.get("sources", {}).items():
        starts = ", ".join(map(str, info["epoch_starts"]))
        print(
            f"{name}: {info['samples']:,} samples of {info['windows']:,} windows, "
            f"{info['epochs_completed']} epoch(s) completed; epochs start at steps {starts}"
        )
    for name, p in report.get("packing", {}).items():
        print(
            f"{name} per epoch: {p['documents']:,} documents -> {p['items']:,} items -> "
            f"{p['samples']:,} samples ({p['samples_over_bound_pct']:.2f} % over the bound); "
            f"{p['data_tokens']:,} data, {p['padding_tokens']:,} padding, "
            f"{p['truncated_tokens']:,} truncated tokens"
        )


def _plot(stream: SampleStream, steps: int, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot needs matplotlib: pip install 'streamload[plot]'")
        return
    counts = batch_source_counts(stream, steps)
    shares = np.cumsum(counts, axis=0) / np.cumsum(counts.sum(axis=1))[:, None]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.stackplot(np.arange(steps), shares.T, labels=[s.name for s in stream.sources])
    for phase in stream.phases[1:]:
        ax.axvline(phase.start_step, color="black", linestyle="--", linewidth=0.8)
    ax.set_xlabel("step")
    ax.set_ylabel("cumulative share of samples")
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path)
    print(f"wrote {path}")
