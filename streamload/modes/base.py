"""The contract of a sampling mode plug-in: :class:`ModeSpec`.

A mode turns described sources into the global sample stream. It is one folder of
:mod:`streamload.modes` (its options checks, its source, its stream, its report) whose package
defines ``MODE = ModeSpec(...)``, found by name in :mod:`streamload.config.modes`. Shared code
never branches on a mode's name or type; it asks the mode:

* the config layer: :attr:`ModeSpec.options` (the mode's own ``[sampling]`` keys),
  :attr:`ModeSpec.check_sampling`, :meth:`ModeSpec.check_config` and
  :attr:`ModeSpec.blends_sources`;
* ``build_loader``: :meth:`ModeSpec.build` (the stream), :meth:`ModeSpec.batch_size`,
  :meth:`ModeSpec.check_evaluation`; ``load_state_dict``: :attr:`ModeSpec.adopt_state`;
* the nodes and the tools: the stream's :class:`~streamload.streams.layout.BatchLayout`;
* ``streamload plan`` and ``streamload samples``: the optional report and samples hooks.

Only ``name`` and ``build`` are required: a stream that satisfies
:class:`streamload.streams.interface.SampleStream` gets exact resumption, the rank split, the
state, ``samples``, ``show`` and ``plan`` from the shared machinery (a mode's stream usually
holds or extends :class:`streamload.streams.source_stream.SourceStream`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamload.errors import ConfigError

if TYPE_CHECKING:
    from streamload.config import DataConfig
    from streamload.streams.interface import SampleStream

__all__ = ["ModeSpec", "SamplesRequest"]


@dataclass(frozen=True)
class SamplesRequest:
    """What ``streamload samples`` asks of a stream (positions or steps of one pass).

    Args:
        pass_index: The pass (epoch) to read.
        start: First position (a mode whose batches vary in shape: first step).
        count: Positions (or steps) to read.
        rank: With ``world_size`` (and ``batch_size``): only what this rank receives.
        world_size: Data-parallel size.
        batch_size: Per-rank batch size.
        out: The file to write.
    """

    pass_index: int
    start: int
    count: int
    rank: int | None
    world_size: int | None
    batch_size: int | None
    out: str


@dataclass(frozen=True, kw_only=True)
class ModeSpec:
    """One sampling mode, as the registry holds it.

    Args:
        name: The ``sampling.mode`` value.
        build: Describe the sources (listing and headers) and build the stream of a config.
        options: The frozen dataclass of the mode's own ``[sampling]`` keys (``None``: it
            has none); its ``__post_init__`` checks them, naming ``sampling.<key>``.
        check_sampling: Checks of the shared ``[sampling]`` keys in this mode (e.g. megatron
            needs ``num_samples``); it may fill a default the mode implies.
        uses_cache_dir: ``sampling.cache_dir`` means something here (built indices, plans).
        own_evaluation_pass: An evaluation loader walks the mode's own pass of the split
            (megatron: Megatron's dataset of that split, in its order, ``shuffle`` refused);
            else every source's split once, the sources one after another.
        check: Checks of the whole config in this mode (``None``: the common checks only).
        blends_sources: Several sources (or a ``[[schedule]]``) form a weighted mixture
            allocated per optimizer step (megatron: no, it blends by its own rule).
        derive_batch_size: ``(config, batch_size or None, world_size) -> batch_size`` where
            the mode can derive or must check the per-rank batch size (``None``: required).
        no_evaluation: Why evaluation loaders (``build_loader(split=...)``) are refused in
            this mode (``None``: they work).
        plan_report: ``(stream, steps) -> {section: report}``: what ``streamload plan`` adds.
        plan_lines: ``report -> lines``: those sections as text.
        plot: ``(stream, path) -> written``: ``streamload plan --plot`` (``None``: the
            mixture's cumulative shares).
        mixture_report: ``streamload plan`` reports the mixture per step (a mode whose plan
            report covers its mixture says no).
        write_samples: ``(stream, request) -> message``: ``streamload samples`` for a mode
            whose batches vary in shape (``None``: rows of one width into ``.npy``).
        cuts_rows: A sample (a window of ``seq_len + 1`` tokens) may be cut into shorter
            rows, so ``[[seq_len_schedule]]`` / ``[seq_len_warmup]`` apply
            (:mod:`streamload.plan.seq_len`; concat and packed).
        adopt_state: ``(config, saved fingerprint) -> config or None``: the config under
            which a state saved with an older default resumes, where the config leaves that
            setting unset (packed: the packing group size of states made before issue 34);
            ``None`` (or returning it): the config as it is.
    """

    name: str
    build: Callable[[DataConfig], SampleStream]
    options: type | None = None
    check_sampling: Callable[[Any], None] | None = None
    uses_cache_dir: bool = False
    own_evaluation_pass: bool = False
    check: Callable[[DataConfig], None] | None = None
    blends_sources: bool = True
    derive_batch_size: Callable[[DataConfig, int | None, int], int] | None = None
    no_evaluation: str | None = None
    plan_report: Callable[[Any, int | None], dict[str, Any]] | None = None
    plan_lines: Callable[[dict[str, Any]], list[str]] | None = None
    plot: Callable[[Any, str], bool] | None = None
    mixture_report: bool = True
    write_samples: Callable[[Any, SamplesRequest], str] | None = None
    cuts_rows: bool = False
    adopt_state: Callable[[DataConfig, Any], DataConfig | None] | None = None

    def check_config(self, config: DataConfig) -> None:
        """Run the mode's checks of a whole config (the config layer calls this)."""
        if self.check is not None:
            self.check(config)

    def batch_size(self, config: DataConfig, batch_size: int | None, world_size: int) -> int:
        """The per-rank batch size ``build_loader`` uses.

        Raises:
            ConfigError: none given where the mode cannot derive it, or a wrong one.
        """
        if self.derive_batch_size is not None:
            return self.derive_batch_size(config, batch_size, world_size)
        if batch_size is None:
            raise ConfigError("build_loader: batch_size is required (per-rank samples per batch)")
        return batch_size

    def check_evaluation(self, split: str | None) -> None:
        """Refuse an evaluation loader over ``split`` where the mode has none.

        Raises:
            ConfigError: ``split`` given and the mode refuses evaluation.
        """
        if split is not None and self.no_evaluation is not None:
            raise ConfigError(
                f"build_loader(split={split!r}) in {self.name} mode: {self.no_evaluation}"
            )
