"""``streamload plan``: the realized mixture per phase and per source epoch, from the plan alone;
each source's split bounds; packed/padded modes: what an epoch holds."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from streamload.config import load_config
from streamload.errors import ConfigError
from streamload.modes import ModeSpec, get_mode

if TYPE_CHECKING:  # the streams and reports load when the command runs, not for --help
    from streamload.streams.interface import SampleStream

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
    from streamload.modes import build_stream
    from streamload.tools.report import mixture_report, split_report

    stream = build_stream(load_config(args.config))
    mode = get_mode(stream.config.sampling.mode_name)
    # the stream's shape, what the mode adds (packed/padded: an epoch of each source; vsl:
    # its lengths), where each source's splits lie, and a mixture's realized shares per step
    report: dict[str, Any] = {"stream": _summary(stream)}
    if mode.plan_report is not None:
        report.update(mode.plan_report(stream, args.steps))
    splits = split_report(stream)
    if splits:
        report["splits"] = splits
    mixture = mode.mixture_report and stream.is_mixture
    if mixture:
        if args.steps is None:
            raise ConfigError(
                "streamload plan: --steps N is required for a mixture's report (global steps "
                "to plan)"
            )
        report.update(mixture_report(stream, args.steps))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report, mode)
    if args.plot:
        _plot_report(stream, mode, args.plot, args.steps if mixture else None)
    return 0


def _plot_report(stream: SampleStream, mode: ModeSpec, path: str, steps: int | None) -> None:
    if mode.plot is not None:
        if mode.plot(stream, path):
            print(f"wrote {path}")
        else:
            print("--plot needs matplotlib: pip install 'streamload[plot]'")
    elif stream.is_mixture and steps is not None:
        _plot(stream, steps, path)


def _summary(stream: SampleStream) -> dict[str, Any]:
    """The stream's shape: its mode, sample length, pass and each source's epoch."""
    return {
        "mode": stream.config.sampling.mode_name,
        "seq_len": stream.seq_len,
        "unit": stream.layout.unit,
        "pass_length": stream.pass_length,
        "sources": {s.name: {"per_epoch": s.num_windows} for s in stream.sources},
    }


def _print(report: dict[str, Any], mode: ModeSpec) -> None:
    summary = report["stream"]
    length = summary["pass_length"]
    print(
        f"{summary['mode']} mode, seq_len {summary['seq_len']}; a pass holds "
        + ("no end (an endless mixture)" if length is None else f"{length:,} {summary['unit']}")
    )
    for name, info in summary["sources"].items():
        print(f"  {name}: {info['per_epoch']:,} {summary['unit']} per epoch")
    if mode.plan_lines is not None:
        for line in mode.plan_lines(report):
            print(line)
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
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot needs matplotlib: pip install 'streamload[plot]'")
        return
    import numpy as np

    from streamload.tools.report import batch_source_counts

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
