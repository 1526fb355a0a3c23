"""``streamload plan``: the realized mixture per phase and per source epoch, from the plan alone;
each source's split bounds; packed/padded modes: what an epoch holds.

``--plot FILE`` always writes a plot or exits 2 saying why not: the mode's own plot (vsl: its
curriculum), else a mixture's cumulative shares over the ``--steps`` planned, else the
report's per-source sections (packed/padded: an epoch's data, padding and truncated tokens;
``sampling.split``: the split bounds); a single-source config with none of these has nothing
to plot.
"""

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
    p.add_argument(
        "--steps",
        type=int,
        help="global steps to plan (required for a mixture's report; >= 0, within its pass)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        help="plot the report (needs matplotlib): vsl: its curriculum; a mixture: cumulative "
        "shares per step; else packed/padded packing and split bounds per source; exits 2 "
        "when there is nothing to plot",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the report; returns the exit code."""
    from streamload.modes import build_stream
    from streamload.tools.report import (
        batch_schedule_report,
        check_plan_steps,
        mixture_report,
        seq_len_report,
        split_report,
    )

    stream = build_stream(load_config(args.config))
    steps = check_plan_steps(stream, args.steps)
    mode = get_mode(stream.config.sampling.mode_name)
    # the stream's shape, what the mode adds (packed/padded: an epoch of each source; vsl:
    # its lengths), where each source's splits lie, and a mixture's realized shares per step
    report: dict[str, Any] = {"stream": _summary(stream)}
    if mode.plan_report is not None:
        report.update(mode.plan_report(stream, steps))
    report.update(seq_len_report(stream))
    report.update(batch_schedule_report(stream))
    splits = split_report(stream)
    if splits:
        report["splits"] = splits
    mixture = mode.mixture_report and stream.is_mixture
    if mixture:
        if steps is None:
            raise ConfigError(
                "streamload plan: --steps N is required for a mixture's report (global steps "
                "to plan)"
            )
        report.update(mixture_report(stream, steps))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report, mode)
    if args.plot:
        _plot_report(stream, mode, report, args.plot)
    return 0


def _plot_report(stream: SampleStream, mode: ModeSpec, report: dict[str, Any], path: str) -> None:
    from streamload.tools.report_plot import NEEDS_MATPLOTLIB, plot_plan

    if mode.plot is None:
        plot_plan(stream, report, path)
    elif mode.plot(stream, path):
        print(f"wrote {path}")
    else:
        raise ConfigError(NEEDS_MATPLOTLIB)


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
    for line in _seq_len_lines(report.get("seq_len_schedule", [])):
        print(line)
    for line in _batch_schedule_lines(report.get("batch_schedule", [])):
        print(line)
    if "batch_sizes" in report:
        runs = ", ".join(f"{size} from step {first}" for first, size in report["batch_sizes"])
        print(f"{report['steps']} steps of a batch size schedule: {runs}")
    elif "steps" in report:
        print(f"{report['steps']} steps of {report['global_batch_size']} samples")
    for phase in report.get("phases", []):
        print(
            f"phase steps [{phase['start_step']}, {phase['end_step']}): "
            + (
                f"max per-batch deviation {phase['max_batch_deviation']:.2f} samples"
                if "max_batch_deviation" in phase
                else "one source a step; max deviation from the share since the phase began "
                f"{phase['max_prefix_deviation']:.2f} samples"
            )
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


def _batch_schedule_lines(runs: list[dict[str, Any]]) -> list[str]:
    """The batch size schedule, a line per run of equal steps."""
    lines = ["batch size schedule (samples per optimizer step):"] if runs else []
    for run in runs:
        first, count = run["first_step"], run["steps"]
        where = f"steps [{first:,}, {first + count:,})" if count else f"steps [{first:,}, …)"
        lines.append(
            f"  {where}: {run['global_batch_size']:,} samples a step, from sample "
            f"{run['first_sample']:,}"
        )
    return lines


def _seq_len_lines(stretches: list[dict[str, Any]]) -> list[str]:
    if not stretches:
        return []
    first = stretches[0]
    lines = [f"sequence-length schedule: {first['tokens_per_step']:,} input tokens per step"]
    for part in stretches:
        end = "…)" if part["end_step"] is None else f"{part['end_step']})"
        lines.append(
            f"  steps [{part['start_step']}, {end}: seq_len {part['seq_len']}, "
            f"{part['rows_per_window']} row(s) per window, {part['rows_per_step']:,} per step"
        )
    return lines


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
