"""Megatron-Core ``GPTDataset`` indices, bit-identical and vectorized (FORMATS §2.1-2.7).

megatron-core (verified against 0.16.1) builds three arrays per dataset split; sample ``i``
of the dataset is read through all three:

* ``document_index`` (int32, ``E * n`` long): the split's sequence ids repeated for ``E``
  epochs and shuffled by ``numpy.random.RandomState(seed)``;
* ``sample_index`` (``[N + 1, 2]``): row ``k`` = (position in ``document_index``, token offset)
  where sample ``k`` starts; samples hold ``seq_len + extra`` tokens at stride ``seq_len``;
* ``shuffle_index`` (uint32): a permutation of the ``N`` samples, drawn after the documents.

The C++ ``build_sample_idx`` walks the documents token by token. Here it is one pass of
integer arithmetic: sample ``k`` ends (exclusively, with its extra token) at flat token
``e_k = k * seq_len + extra``; it ends inside the first document whose cumulative end is
``>= e_k`` and starts its successor at offset ``k * seq_len - start_of_that_document``. The
document of every row is a running count of document ends passed, built with one
``bincount`` + ``cumsum`` (linear, no search). The RNG draws use numpy's own
``RandomState.shuffle``, exactly as Megatron does, so the draw order is the same by
construction.

Example (3 sequences of 5, 3 and 4 tokens, one epoch, seq_len 4, extra token, seed 1):

>>> import numpy as np
>>> doc, smp, shf = build_gpt_indices(np.array([5, 3, 4], np.int32), np.arange(3), None, 4, 1)
>>> doc.tolist(), smp.tolist(), shf.tolist()
([0, 2, 1], [[0, 0], [0, 4], [1, 3]], [1, 0])

The shuffled documents hold 5, 4 and 3 tokens (ends 5, 9, 12); ``N = (12 - 1) // 4 = 2``.
Sample 0 is tokens ``[0, 5)``: it ends at ``e_1 = 5`` inside document position 0, so sample 1
starts there at offset 4 (the shared token). Sample 1 ends at ``e_2 = 9``, in position 1, so
the last row is ``(1, 9 - 1 - 5) = (1, 3)``. The shuffle index then swaps the two samples.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from streamload.errors import ConfigError

# The split functions live in plan/split.py (every sampling mode splits); kept importable here.
from streamload.plan.split import parse_split, split_matrix, split_ranges

__all__ = [
    "SEPARATE_LAST_EPOCH_THRESHOLD",
    "GPTIndices",
    "build_document_index",
    "build_gpt_indices",
    "build_sample_index",
    "build_shuffle_index",
    "gpt_index_dtypes",
    "num_epochs",
    "num_samples_in_index",
    "parse_split",
    "separate_last_epoch",
    "split_matrix",
    "split_ranges",
]

SEPARATE_LAST_EPOCH_THRESHOLD = 0.80
"""The last epoch is shuffled apart when it holds fewer than this share of an epoch's samples."""

_INT32_MAX = int(np.iinfo(np.int32).max)
_UINT32_MAX = int(np.iinfo(np.uint32).max)


class GPTIndices(NamedTuple):
    """The three arrays of a Megatron ``GPTDataset``, in Megatron's dtypes."""

    document_index: np.ndarray
    sample_index: np.ndarray
    shuffle_index: np.ndarray


def num_epochs(tokens_per_epoch: int, num_samples: int | None, seq_len: int, extra: int) -> int:
    """Smallest ``E >= 1`` with ``E * tokens_per_epoch >= num_samples * seq_len + extra``.

    ``num_samples=None`` means one epoch.
    """
    if num_samples is None:
        return 1
    if tokens_per_epoch <= 0:
        raise ConfigError(f"tokens_per_epoch is {tokens_per_epoch}; expected > 0")
    needed = num_samples * seq_len + extra
    return max(1, -(-needed // tokens_per_epoch))


def num_samples_in_index(
    tokens_per_epoch: int, epochs: int, seq_len: int, extra: int, drop_last_partial: bool
) -> int:
    """``N``, the samples the sample index holds (``len(GPTDataset)``).

    ``(E * tpe - extra) // seq_len`` when dropping the last partial sample, else the C++'s
    single-precision ``ceil(float(E * tpe - extra) / seq_len)``.
    """
    tokens = epochs * tokens_per_epoch - extra
    if drop_last_partial:
        return tokens // seq_len
    return int(np.ceil(np.float32(tokens) / np.float32(seq_len)))


def separate_last_epoch(
    tokens_per_epoch: int, epochs: int, num_samples: int | None, seq_len: int, extra: int
) -> tuple[bool, int]:
    """Whether the last epoch is shuffled separately, and ``n_sans`` (samples before it).

    Separate when ``E > 1`` and the last epoch contributes fewer than
    ``int(0.80 * samples_per_epoch)`` of the requested samples. ``n_sans`` is 0 when not
    separate.

    Raises:
        ConfigError: the request is inconsistent with ``E`` (Megatron asserts).
    """
    if epochs == 1 or num_samples is None:
        return False, 0
    n_sans = ((epochs - 1) * tokens_per_epoch - extra) // seq_len
    n_final = num_samples - n_sans
    n_per = (tokens_per_epoch - extra) // seq_len
    if not 0 <= n_final <= n_per + 1:
        raise ConfigError(
            f"num_samples {num_samples}: {n_final} samples from the last of {epochs} epochs, "
            f"expected 0..{n_per + 1}; E does not match the request"
        )
    return n_final < int(SEPARATE_LAST_EPOCH_THRESHOLD * n_per), n_sans


def build_document_index(
    indices: np.ndarray, epochs: int, rng: np.random.RandomState, separate_last: bool
) -> np.ndarray:
    """``indices`` tiled ``epochs`` times as int32 and shuffled in place by ``rng``.

    With ``separate_last`` the first ``E - 1`` epochs and the last one are shuffled apart,
    in that order (two draws from the same ``rng``). Returns int32 ``[E * len(indices)]``.
    """
    if separate_last and epochs > 1:
        first = build_document_index(indices, epochs - 1, rng, False)
        last = build_document_index(indices, 1, rng, False)
        return np.concatenate((first, last))
    document_index = np.tile(np.asarray(indices).astype(np.int32, copy=False), epochs)
    rng.shuffle(document_index)
    return document_index


def _sample_index_dtype(num_documents: int, longest: int) -> type[np.integer]:
    return np.int32 if max(num_documents, longest) <= _INT32_MAX else np.int64


def _longest(sequence_lengths: np.ndarray) -> int:
    return int(sequence_lengths.max()) if sequence_lengths.size else 0


def _shuffle_index_dtype(total_size: int) -> type[np.integer]:
    return np.int64 if total_size >= _UINT32_MAX - 1 else np.uint32


def build_sample_index(
    sequence_lengths: np.ndarray,
    document_index: np.ndarray,
    seq_len: int,
    epochs: int,
    tokens_per_epoch: int,
    drop_last_partial: bool = True,
    add_extra_token: bool = True,
) -> np.ndarray:
    """The ``[N + 1, 2]`` sample index of megatron's C++ ``build_sample_idx``.

    Args:
        sequence_lengths: Token count of every sequence of the IndexedDataset (all of it,
            not only the split: its maximum picks the dtype, as Megatron does).
        document_index: From :func:`build_document_index`.
        seq_len: Tokens per sample, without the extra token (> 1).
        epochs: ``E``.
        tokens_per_epoch: Tokens of the split's sequences.
        drop_last_partial: Drop a last sample shorter than ``seq_len + extra``.
        add_extra_token: Samples read ``seq_len + 1`` tokens (``extra = 1``).

    Returns:
        int32 (int64 when ``max(len(document_index), max length) > 2**31 - 1``)
        ``[N + 1, 2]``: (document_index position, offset) where each sample starts; rows
        that run past the data (only the last, when not dropping) are
        ``(D - 1, length_of_last - extra)``.

    Raises:
        ConfigError: bad sizes, or the last row is negative (the data ran out and the last
            document is empty), which megatron-core's ``helpers.build_sample_idx`` asserts.
    """
    extra = int(add_extra_token)
    if seq_len <= 1 or tokens_per_epoch <= 1 or epochs < 1 or document_index.size == 0:
        raise ConfigError(
            f"sample index: seq_len {seq_len}, tokens_per_epoch {tokens_per_epoch}, epochs "
            f"{epochs}, {document_index.size} documents; expected seq_len > 1, tokens > 1, "
            "E >= 1 and documents"
        )
    n = num_samples_in_index(tokens_per_epoch, epochs, seq_len, extra, drop_last_partial)
    lengths = sequence_lengths[document_index]
    rows, offsets = _sample_starts(lengths, n, seq_len, extra)
    if n and offsets[-1] < 0:
        raise ConfigError(
            f"sample index: the last sample runs past the data and the last document "
            f"(sequence {int(document_index[-1])}) is empty, so its end offset is -1; "
            "megatron-core rejects this (assertion in helpers.build_sample_idx)"
        )
    dtype = _sample_index_dtype(document_index.size, _longest(sequence_lengths))
    out = np.empty((n + 1, 2), dtype=dtype)
    out[0] = 0
    out[1:, 0] = rows
    out[1:, 1] = offsets
    return out


def _sample_starts(
    lengths: np.ndarray, n: int, seq_len: int, extra: int
) -> tuple[np.ndarray, np.ndarray]:
    """Where samples ``1..n`` start: ``(document_index position, offset)``, both int64 ``[n]``.

    ``lengths`` are the token counts in document-index order. A sample past the data (only
    the last, when not dropping) stands at ``(D - 1, length_of_last - extra)``.
    """
    ends = lengths.astype(np.int64)
    np.cumsum(ends, out=ends)  # 10x faster than cumsum(dtype=int64) on int32 input
    # Row k's document = number of document ends e with e < k * seq_len + extra, i.e. ends
    # whose first row past them is k_e = (e - extra) // seq_len + 1.
    first_row = ends - extra
    first_row //= seq_len
    first_row += 1
    np.clip(first_row, 0, n + 1, out=first_row)
    passed = np.cumsum(np.bincount(first_row, minlength=n + 2)[: n + 1])
    rows = passed[1:]
    del first_row, passed
    num_docs = lengths.size
    ran_out = rows >= num_docs
    rows[ran_out] = num_docs - 1
    starts = ends[rows] - lengths[rows]
    offsets = np.arange(1, n + 1, dtype=np.int64) * seq_len - starts
    offsets[ran_out] = int(lengths[-1]) - extra
    return rows, offsets


def build_shuffle_index(
    num_samples: int, total_size: int, rng: np.random.RandomState
) -> np.ndarray:
    """``shuffle(arange(num_samples))`` then ``shuffle(arange(num_samples, total_size))``.

    uint32, or int64 when ``total_size >= 2**32 - 2`` (megatron's ``_build_shuffle_index``).
    """
    dtype = _shuffle_index_dtype(total_size)
    first = np.arange(0, num_samples, dtype=dtype)
    rng.shuffle(first)
    if num_samples == total_size:
        return first
    last = np.arange(num_samples, total_size, dtype=dtype)
    rng.shuffle(last)
    return np.concatenate((first, last))


def build_gpt_indices(
    sequence_lengths: np.ndarray,
    indices: np.ndarray,
    num_samples: int | None,
    seq_len: int,
    seed: int,
    add_extra_token: bool = True,
    drop_last_partial: bool = True,
) -> GPTIndices:
    """The document, sample and shuffle indices of one megatron ``GPTDataset`` split.

    Args:
        sequence_lengths: int32 lengths of every sequence of the IndexedDataset.
        indices: The split's sequence ids (``numpy.arange(begin, end)``, see
            :func:`split_ranges`).
        num_samples: Samples requested for the split (``None``: one epoch).
        seq_len: ``sequence_length`` (> 1).
        seed: ``random_seed``; one ``RandomState`` per dataset.
        add_extra_token: ``add_extra_token_to_sequence``.
        drop_last_partial: True for train/test; for valid,
            ``drop_last_partial_validation_sequence``.

    Returns:
        :class:`GPTIndices` (int32 ``[E*n]``, int32/int64 ``[N+1, 2]``, uint32/int64 ``[N]``).

    Raises:
        ConfigError: no sequences, fewer than 2 tokens, ``seq_len < 2``, or a case
            megatron-core rejects (see :func:`build_sample_index`).
    """
    lengths = np.asarray(sequence_lengths)
    indices = np.asarray(indices)
    if indices.size == 0:
        raise ConfigError("GPT indices: the split holds no sequences")
    extra = int(add_extra_token)
    tokens_per_epoch = int(np.sum(lengths[indices], dtype=np.int64))
    epochs = num_epochs(tokens_per_epoch, num_samples, seq_len, extra)
    separate, n_sans = separate_last_epoch(tokens_per_epoch, epochs, num_samples, seq_len, extra)
    rng = np.random.RandomState(seed)
    document_index = build_document_index(indices, epochs, rng, separate)
    sample_index = build_sample_index(
        lengths,
        document_index,
        seq_len,
        epochs,
        tokens_per_epoch,
        drop_last_partial,
        add_extra_token,
    )
    total = sample_index.shape[0] - 1
    shuffle_index = build_shuffle_index(n_sans if separate else total, total, rng)
    return GPTIndices(document_index, sample_index, shuffle_index)


def gpt_index_dtypes(
    num_documents: int, longest: int, num_samples: int
) -> tuple[np.dtype, np.dtype, np.dtype]:
    """The dtypes megatron-core gives the document, sample and shuffle index of a dataset with
    ``num_documents`` document-index entries, ``num_samples`` samples and ``longest`` tokens
    in its longest sequence (of the whole IndexedDataset): int32; int32 or int64; uint32 or
    int64."""
    return (
        np.dtype(np.int32),
        np.dtype(_sample_index_dtype(num_documents, longest)),
        np.dtype(_shuffle_index_dtype(num_samples)),
    )
