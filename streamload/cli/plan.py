"""``streamload plan``: the realized mixture per phase and per source epoch, from the plan alone;
each source's split bounds; packed/padded modes: what an epoch holds."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from streamload.config import load_config
from streamload.errors import ConfigError

if TYPE_CHECKING:
    from streamload.streams.interface import SampleStream
    from streamload.streams.vsl import VslStream

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser(
        "plan", help="show the realized mixture of the first N steps, the splits, the packing"
    )
    p.add_argument(
        "config",
        help="TOML/YAML/JSON data config (a mixture; with sampling.split: each source's split "
        "bounds; packed/padded: also the packing)",
    )
    p.add_argument("--steps", type=int, help="global steps to plan (a mixture's report)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--plot", metavar="FILE.png", help="plot cumulative shares (needs matplotlib)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the report; returns the exit code."""
    from streamload.streams.interface import SampleStream
    from streamload.streams.vsl import VslStream
    from streamload.tools.report import mixture_report, split_report

    stream = SampleStream.from_config(load_config(args.config))
    if isinstance(stream, VslStream):
        return _run_vsl(stream, args)
    packing = {s.name: s.packing_report() for s in stream.sources if hasattr(s, "packing_report")}
    # packed and padded modes: what an epoch of each source holds; a split: where each
    # source's splits lie (any config); the mixture part needs a mixture
    report: dict[str, Any] = {"packing": packing} if packing else {}
    splits = split_report(stream)
    if splits:
        report["splits"] = splits
    if stream.is_mixture or not report:
        if args.steps is None:
            raise ConfigError(
                "streamload plan: --steps N is required for a mixture's report (global steps "
                "to plan)"
            )
        report.update(mixture_report(stream, args.steps))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report)
    if args.plot and stream.is_mixture and args.steps is not None:
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
    for name, info in report.get("splits", {}).items():
        _print_split(name, info)
    for name, p in report.get("packing", {}).items():
        print(
            f"{name} per epoch: {p['documents']:,} documents -> {p['items']:,} items -> "
            f"{p['samples']:,} samples ({p['samples_over_bound_pct']:.2f} % over the bound); "
            f"{p['data_tokens']:,} data, {p['padding_tokens']:,} padding, "
            f"{p['truncated_tokens']:,} truncated tokens"
        )


def _print_split(name: str, info: dict[str, Any]) -> None:
    docs = info["total_documents"]
    counted = "documents found by EOS" if docs is None else f"{docs:,} {info['rule']}"
    print(
        f"{name}: split {info['split']!r} over {counted} and {info['total_tokens']:,} tokens "
        f"(this config reads {info['reads']!r})"
    )
    for part, bounds in info["parts"].items():
        tokens = bounds["tokens"]
        where = f"tokens [{tokens[0]:,}, {tokens[1]:,})"
        if bounds["documents"] is not None:
            first, end = bounds["documents"]
            where = f"{info['rule']} [{first:,}, {end:,}), {where}"
        print(f"  {part:<6} {where}" + ("  (empty)" if tokens[0] == tokens[1] else ""))


def _plot(stream: SampleStream, steps: int, path: str) -> None:
    import numpy as np

    from streamload.tools.report import batch_source_counts

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


def _run_vsl(stream: VslStream, args: argparse.Namespace) -> int:
    """vsl mode: what one epoch holds per length and per curriculum segment."""
    from streamload.tools.report import split_report
    from streamload.tools.vsl_report import plot_curriculum, report_lines, vsl_report

    report: dict[str, Any] = {"vsl": vsl_report(stream)}
    splits = split_report(stream)
    if splits:
        report["splits"] = splits
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print("\n".join(report_lines(report["vsl"])))
        for name, info in report.get("splits", {}).items():
            _print_split(name, info)
    if args.plot:
        if plot_curriculum(stream, args.plot):
            print(f"wrote {args.plot}")
        else:
            print("--plot needs matplotlib: pip install 'streamload[plot]'")
    return 0
