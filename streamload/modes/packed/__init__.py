"""``sampling.mode = "packed"`` and ``"padded"``: whole documents (or pieces of long ones) as
samples, packed best-fit or one per sample, then padding (docs/sampling.md): the checks
(:mod:`.checks`), a source's cached plan (:mod:`.plan_cache`, :mod:`.source`) and the stream
(:mod:`.stream`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from streamload.modes.base import ModeSpec
from streamload.modes.packed.options import PackedOptions, check_packed_sampling

if TYPE_CHECKING:
    from streamload.config import DataConfig
    from streamload.streams.interface import SampleStream

__all__ = ["PACKED", "PADDED"]


def _check(config: DataConfig) -> None:
    from streamload.modes.packed.checks import check_packed_config

    check_packed_config(config)


def _build(config: DataConfig) -> SampleStream:
    from streamload.modes.packed.stream import PackedStream

    return PackedStream.from_config(config)


def _plan_report(stream: Any, steps: int | None) -> dict[str, Any]:
    """What an epoch of each source holds: documents, items, samples, padding (and the cap
    of documents per sample and the packing group size, when set)."""
    out: dict[str, Any] = {
        "packing": {source.name: source.packing_report() for source in stream.sources}
    }
    for key in ("max_documents_per_sample", "group_size"):
        value = getattr(stream.config.sampling, key)
        if value is not None:
            out[key] = int(value)
    return out


def _plan_lines(report: dict[str, Any]) -> list[str]:
    cap, group = report.get("max_documents_per_sample"), report.get("group_size")
    head = [] if cap is None else [f"at most {cap:,} documents per sample"]
    head += [] if group is None else [f"best fit within groups of {group:,} items"]
    lines = list(head)
    for name, p in report.get("packing", {}).items():
        lines.append(
            f"{name} per epoch: {p['documents']:,} documents -> {p['items']:,} items -> "
            f"{p['samples']:,} samples ({p['samples_over_bound_pct']:.2f} % over the bound); "
            f"{p['data_tokens']:,} data, {p['padding_tokens']:,} padding, "
            f"{p['truncated_tokens']:,} truncated tokens"
        )
        labels, trained = p["label_tokens"], p["trained_tokens"]
        lines.append(
            f"  trained labels {trained:,} of {labels:,} ({100.0 * trained / labels:.2f} %); "
            f"documents truncated {p['truncated_documents']:,}, dropped "
            f"{p['dropped_documents']:,} ({p['dropped_tokens']:,} tokens)"
        )
    return lines


def _adopt_state(config: DataConfig, fingerprint: Mapping[str, Any]) -> DataConfig | None:
    """The config that resumes a state packed within groups (the rule before issue 34, groups
    of 4,096 items) when ``sampling.group_size`` is unset: that state's group size. A set
    group size, another mode or rule, or a malformed field adopts nothing (the fingerprint
    check then names what differs)."""
    from streamload.config.sampling import SamplingConfig
    from streamload.plan.packing import GROUPED_ALGORITHM

    saved = fingerprint.get("packing")
    sampling = config.sampling
    if sampling.mode_name != "packed" or sampling.group_size is not None:
        return None
    if not isinstance(saved, Mapping) or saved.get("algorithm") != GROUPED_ALGORITHM:
        return None
    group = saved.get("group_size")
    if isinstance(group, bool) or not isinstance(group, int) or group < 1:
        return None
    adopted = SamplingConfig(**{**sampling.table(), "group_size": group})
    return dataclasses.replace(config, sampling=adopted)


_SHARED: dict[str, Any] = {
    "build": _build,
    "options": PackedOptions,
    "check_sampling": check_packed_sampling,
    "uses_cache_dir": True,
    "check": _check,
    "plan_report": _plan_report,
    "plan_lines": _plan_lines,
    "adopt_state": _adopt_state,
}
PACKED = ModeSpec(name="packed", cuts_rows=True, **_SHARED)
"""The packed mode's plug-in."""
PADDED = ModeSpec(name="padded", **_SHARED)
"""The padded mode's plug-in (one item per sample)."""
