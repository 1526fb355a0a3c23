"""``sampling.mode = "megatron"``: the global stream is megatron-core's dataset, index by index.

Global sample ``g`` (``0 <= g < min(num_samples, len(dataset))``) is exactly the ``text``
array megatron-core 0.16.1's ``GPTDataset`` (one source without a weight) or
``BlendedDataset`` (weights, or several sources) returns for index ``g`` with the same data,
split, seed and sequence length: ``seq_len + 1`` tokens with ``add_extra_token``, ``seq_len``
without. The loader maps it to ``input_ids = text[:-1]``, ``labels = text[1:]`` (without the
extra token: ``input_ids = text``, ``labels = text[1:] + [-100]``, Megatron's rolled label whose
loss is masked); pad positions of a short last sample become input 0 and label -100.

There is one pass: Megatron has no second one, so a further ``iter()`` yields nothing. The
cursor and state are those of the core (the global sample cursor); the planning, rank split
and resumption are unchanged. See docs/megatron.md.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from streamload.catalog.sources import SourceCatalog, describe_sources
from streamload.config import DataConfig
from streamload.config.batch_schedule import batch_schedule_fingerprint, step_sizes
from streamload.errors import FormatError
from streamload.modes.megatron.indices import ALGORITHM, GPT_FIELDS, load_indices
from streamload.modes.megatron.source import PAD_TOKEN, MegatronSource
from streamload.plan.megatron import GPTIndices, split_matrix
from streamload.plan.megatron_layout import megatron_layout
from streamload.plan.mixture import Phase
from streamload.plan.partition import chunk_sample_ids, step_batches_left, walk_steps
from streamload.streams.chunks import ChunkPlan, TokenChunk, new_loss_mask, put_loss_mask
from streamload.streams.cursor import StreamCursor
from streamload.streams.layout import BatchLayout

__all__ = ["ALGORITHM", "MegatronStream"]

_COUNT_BLOCK = 1 << 16


class MegatronStream:
    """The samples of a Megatron GPT/blended dataset in global order (one pass; implements
    :class:`streamload.streams.interface.SampleStream`).

    Args:
        config: A config with ``sampling.mode = "megatron"``.
        catalogs: Described sources, one per ``config.sources`` entry.
    """

    layout = BatchLayout(label_padding=True, traced=False)
    """Megatron pads its last sample (pad -1), and ``show`` cannot trace its samples to shard
    offsets."""

    def __init__(self, config: DataConfig, catalogs: tuple[SourceCatalog, ...]) -> None:
        self.config = config
        self.seq_len = config.seq_len
        self.is_mixture = False  # a blend is Megatron's own index, not a streamload mixture
        self.phases: tuple[Phase, ...] = ()
        self.ended_by: str | None = None
        sampling = config.sampling
        self.extra = int(sampling.add_extra_token)
        self.sources = tuple(MegatronSource(c, config) for c in catalogs)
        weighted = all(s.weight is not None for s in config.sources)
        weights = [float(s.weight or 0.0) for s in config.sources] if weighted else None
        assert sampling.num_samples is not None  # SamplingConfig requires it in this mode
        self.blend = megatron_layout(
            [s.num_sequences for s in self.sources],
            weights,
            sampling.megatron_split,
            sampling.split_name.value,
            sampling.num_samples,
        )
        self._arrays, self._files = load_indices(config, self.sources, self.blend)
        self._attach()

    @classmethod
    def from_config(cls, config: DataConfig) -> MegatronStream:
        """Describe every source (listing, headers, sequence lengths) and build the indices."""
        return cls(config, describe_sources(config))

    def _attach(self) -> None:
        for d, (source, spec) in enumerate(zip(self.sources, self.blend.datasets, strict=True)):
            gpt = GPTIndices(*(self._arrays[f"ds{d}_{k}"] for k in GPT_FIELDS))
            tpe = source.sequences.tokens(spec.begin, spec.end)
            source.attach(gpt, tpe, self.seq_len, self.extra)
        blend = self._arrays.get("dataset_index")
        length = int(self._arrays["ds0_shuffle_index"].shape[0]) if blend is None else blend.size
        assert self.config.sampling.num_samples is not None
        self.length = min(self.config.sampling.num_samples, length)
        self._block_counts: np.ndarray | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if self._files is not None:  # mapped files travel as paths, not as copies
            state["_arrays"] = {k: v for k, v in self._arrays.items() if k not in self._files}
            state["sources"] = tuple(_without_indices(s) for s in self.sources)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self._files is not None:
            for name, path in self._files.items():
                self._arrays[name] = np.load(path, mmap_mode="r", allow_pickle=False)
            self._attach()

    # -- shape of the stream -------------------------------------------------------------
    @property
    def pass_length(self) -> int | None:
        """Samples of the stream: ``min(num_samples, len(dataset))``."""
        return self.length

    @property
    def num_windows(self) -> int:
        """Samples of one data epoch of the first source."""
        return self.sources[0].num_windows

    @property
    def has_documents(self) -> bool:
        """False: Megatron finds documents by the EOD token inside each sample."""
        return False

    def start(self, pass_index: int = 0) -> StreamCursor:
        """The cursor at the start of a pass (only pass 0 holds samples)."""
        return StreamCursor(pass_index, 0, None)

    def batches_left(self, cursor: StreamCursor, global_batch: int) -> int | None:
        """Global batches left, of whole optimizer steps only; 0 after the one pass.

        megatron-core's layout: a step of ``global_batch_size`` samples is its
        ``num_microbatches`` global micro-batches in order, rank r taking ``[r·b, (r+1)·b)``
        of each (``MegatronPretrainingSampler``); its training loop runs whole steps.
        """
        if cursor.pass_index > 0:
            return 0
        steps = step_sizes(self.config, global_batch, cursor.pass_index)
        done, size = cursor.in_step, cursor.step_size
        return step_batches_left(self.length, cursor.sample, done, size, global_batch, steps)

    def next_pass(self, cursor: StreamCursor) -> StreamCursor:
        """An empty pass: Megatron's dataset ends after ``num_samples``."""
        return self.start(cursor.pass_index + 1)

    def advance(self, cursor: StreamCursor, batches: int, global_batch: int) -> StreamCursor:
        """The cursor after ``batches`` more delivered global batches."""
        steps = step_sizes(self.config, global_batch, cursor.pass_index)
        samples = batches * global_batch
        position = (cursor.in_step, cursor.step_size, samples, steps, cursor.sample)
        _, _, done, size = walk_steps(*position)
        return replace(cursor, sample=cursor.sample + samples, in_step=done, step_size=size)

    # -- planning and reading ------------------------------------------------------------
    def plan_chunk(
        self, cursor: StreamCursor, max_batches: int, global_batch: int, world_size: int, rank: int
    ) -> tuple[ChunkPlan, StreamCursor] | None:
        """Up to ``max_batches`` batches of ``rank`` from ``cursor``; ``None`` once it ended."""
        count = min(max_batches, self.batches_left(cursor, global_batch) or 0)
        if count == 0:
            return None
        ids = chunk_sample_ids(cursor.sample, 0, count, global_batch, world_size, rank)
        src, local = self.locate(cursor.pass_index, ids)
        plan = ChunkPlan(cursor.pass_index, ids, src, local)
        return plan, self.advance(cursor, count, global_batch)

    def locate(self, pass_index: int, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(dataset, sample of that GPTDataset) of global sample ids (any shape)."""
        ids = np.asarray(samples, dtype=np.int64)
        if pass_index != 0 and ids.size:
            raise IndexError(f"pass {pass_index}: a megatron stream has one pass (pass 0)")
        if ids.size and (ids.min() < 0 or ids.max() >= self.length):
            raise IndexError(f"sample index out of range [0, {self.length})")
        index = self._arrays.get("dataset_index")
        if index is None:
            return np.zeros(ids.shape, np.int16), ids
        sample = self._arrays["dataset_sample_index"]
        return np.asarray(index[ids], np.int16), np.asarray(sample[ids], np.int64)

    def read_chunk(self, plan: ChunkPlan, documents: bool) -> TokenChunk:
        """Samples as ``[n, seq_len + 1]`` rows (pad ``-1`` where Megatron pads).

        ``documents`` is ignored: masks find documents by EOD, as Megatron does.
        """
        ids = plan.sample_ids.ravel()
        text, skipped, loss_mask = self._text(plan.sources.ravel(), plan.local_ids.ravel(), ids)
        if not self.extra:  # the rolled label past the end is Megatron's pad
            pad = np.full((text.shape[0], 1), PAD_TOKEN, dtype=np.int64)
            text = np.concatenate([text.astype(np.int64), pad], axis=1)
            if loss_mask is not None:
                loss_mask = np.concatenate([loss_mask, np.zeros_like(pad, np.uint8)], axis=1)
        return TokenChunk(plan, text, ids.astype(np.int64), None, skipped, loss_mask=loss_mask)

    def _text(
        self, src: np.ndarray, local: np.ndarray, ids: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """The rows of samples ``local`` of sources ``src``, the rows skipped under
        ``on_error = "skip"`` (zeros), and the rows' loss flags (``None``: no masks)."""
        width = self.seq_len + self.extra
        rows = {d: np.flatnonzero(src == d) for d in np.unique(src).tolist()}
        parts, skipped = {}, [np.zeros(0, dtype=np.int64)]
        loss_mask = new_loss_mask(self.sources, (src.shape[0], width))
        for d, r in rows.items():
            parts[d], _, bad, mask = self.sources[d].read(local[r], width)
            skipped.append(r[bad])
            if loss_mask is not None:
                loss_mask = put_loss_mask(loss_mask, r, mask)
        if len(parts) == 1:
            out = next(iter(parts.values()))
        else:
            dtype = np.result_type(*[p.dtype for p in parts.values()]) if parts else np.int64
            out = np.empty((src.shape[0], width), dtype=dtype)
            for d, part in parts.items():
                out[rows[d]] = part
        self._check_tokens(out, ids)
        return out, np.sort(np.concatenate(skipped)), loss_mask

    def _check_tokens(self, text: np.ndarray, ids: np.ndarray) -> None:
        vocab = self.config.vocab_size
        if vocab is None or text.size == 0 or int(text.max()) < vocab:
            return
        row, col = (int(v[0]) for v in np.nonzero(text >= vocab))
        src, _ = self.locate(0, ids[row : row + 1])
        source = self.sources[int(src[0])]
        raise FormatError(
            f"source {source.name!r} ({source.catalog.shards[0].path}): global sample "
            f"{int(ids[row])} token {col} is {int(text[row, col])}, expected < vocab_size = "
            f"{vocab}; the data was tokenized with another vocabulary"
        )

    def read(self, pass_index: int, samples: Any) -> tuple[np.ndarray, np.ndarray]:
        """Megatron's ``text`` (int64 ``[n, seq_len + extra]``, pad -1) of global sample ids."""
        ids = np.asarray(samples, dtype=np.int64).ravel()
        src, local = self.locate(pass_index, ids)
        return self._text(src, local, ids)[0].astype(np.int64), ids

    def window_starts(self, pass_index: int, samples: np.ndarray) -> np.ndarray:
        """The global sample ids themselves (Megatron samples are not stream windows)."""
        return np.asarray(samples, dtype=np.int64)

    # -- accounting ----------------------------------------------------------------------
    def source_positions(self, cursor: StreamCursor) -> dict[str, dict[str, int]]:
        """Per source: samples taken from its dataset before the cursor, and their epoch."""
        drawn = self._drawn(cursor.sample)
        return {
            s.name: {"epoch": d // s.num_windows, "samples": d}
            for s, d in zip(self.sources, drawn, strict=True)
        }

    def _drawn(self, sample: int) -> list[int]:
        index = self._arrays.get("dataset_index")
        if index is None:
            return [sample]
        count = len(self.sources)
        if self._block_counts is None:  # cumulative counts every 64 Ki samples, once
            blocks = [np.zeros(count, np.int64)]
            for begin in range(0, index.size, _COUNT_BLOCK):
                chunk = np.asarray(index[begin : begin + _COUNT_BLOCK])
                blocks.append(blocks[-1] + np.bincount(chunk, minlength=count))
            self._block_counts = np.stack(blocks)
        block = min(sample, index.size) // _COUNT_BLOCK
        rest = np.asarray(index[block * _COUNT_BLOCK : sample])
        return (self._block_counts[block] + np.bincount(rest, minlength=count)).tolist()

    def fingerprint(self, cursor: StreamCursor | None = None) -> dict[str, Any]:
        """Every input of the indices (docs/design.md §2.8); batch and masks left out."""
        s = self.config.sampling
        out: dict[str, Any] = {
            "algorithm": ALGORITHM,
            "mode": s.mode_name,
            "seq_len": self.seq_len,
            "seed": self.config.seed,
            "num_samples": s.num_samples,
            "split": [None if b is None else list(b) for b in split_matrix(s.megatron_split)],
            "split_name": s.split_name.value,
            "add_extra_token": s.add_extra_token,
            "drop_last_partial": s.drop_last_partial,
            "sources": [src.name for src in self.sources],
            "weights": [src.weight for src in self.config.sources],
            "data": {src.name: src.catalog.fingerprint() for src in self.sources},
        }
        batches = batch_schedule_fingerprint(self.config)
        if batches is not None:  # only when set: states saved without one still load
            out["batch_schedule"] = batches
        return out


def _without_indices(source: MegatronSource) -> MegatronSource:
    copy = object.__new__(MegatronSource)
    copy.__dict__.update(source.__dict__)
    copy.indices = None
    return copy
