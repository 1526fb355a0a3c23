"""Property: the megatron stream's samples equal a literal reading of FORMATS §2.

Random sources (document lengths), seq_len, num_samples, weights (or none), split and flags;
the reference builds each GPT dataset with ``ref_gpt`` (tests/plan/test_megatron.py), blends with
``ref_blending`` (tests/plan/test_megatron_blend.py) after Megatron's surplus sizes, and reads every
sample token by token as §2.8 says. The index builders themselves have their own properties
in those files; this one covers the layout, the blend wiring and the vectorized read (of
sources of one to three shards: the sequence table over shards).
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from streamload import load_config
from streamload.errors import ConfigError
from streamload.formats.megatron.megatron import MegatronWriter
from streamload.plan.megatron import split_ranges
from streamload.streams.interface import SampleStream
from tests.plan.test_megatron import ref_gpt
from tests.plan.test_megatron_blend import ref_blending


def ref_text(tokens, sizes, gpt, j, seq_len, extra) -> list[int]:
    """FORMATS §2.8: sample j of one GPT dataset, piece by piece, padded with -1."""
    doc, sample, shuffle = gpt
    starts = np.concatenate([[0], np.cumsum(sizes)])
    k = int(shuffle[j])
    (d0, o0), (d1, o1) = sample[k], sample[k + 1]
    out: list[int] = []
    for d in range(int(d0), int(d1) + 1):
        seq = int(doc[d])
        begin = int(o0) if d == d0 else 0
        end = int(o1) + extra if d == d1 else int(sizes[seq])
        out += tokens[starts[seq] + begin : starts[seq] + end].tolist()
    return out + [-1] * (seq_len + extra - len(out))


def megatron_normalize(weights) -> list[float]:
    """megatron-core ``utils.normalize``, literally: ``numpy.sum``, not the built-in ``sum()``
    (Python 3.12's is compensated and can differ in the last bit: with weights
    ``[1.5, 2.25, 0.75]`` it decided the three-way tie at step 6 otherwise than Megatron)."""
    w = np.array(weights, dtype=np.float64)
    return (w / np.sum(w)).tolist()


def reference(datasets, weights, split, which, num_samples, seq_len, seed, extra, drop):
    """Every sample of the stream, the literal way."""
    ranges = [split_ranges(split, sizes.size)[which] for _, sizes in datasets]
    if weights is None and len(datasets) == 1:
        requested = [num_samples]
    elif weights is None:
        requested = [None] * len(datasets)
    else:
        w = megatron_normalize(weights)
        targets = [math.ceil(num_samples * x) for x in w]
        requested = [math.ceil(t * 1.005) for t in targets]
    gpts = [
        ref_gpt(sizes, np.arange(*r, dtype=np.int32), n, seq_len, seed, extra, drop)
        for (_, sizes), r, n in zip(datasets, ranges, requested, strict=True)
    ]
    if len(gpts) == 1 and weights is None:
        picks = [(0, j) for j in range(min(num_samples, gpts[0][2].size))]
    else:
        lengths = [g[2].size for g in gpts]
        if weights is None:
            size, w = min(num_samples, sum(lengths)), megatron_normalize(lengths)
        else:
            size = sum(targets)
            # BlendedDataset normalizes its (already normalized) weights once more; the last
            # bit can differ and decide an exact tie of the greedy rule.
            w = megatron_normalize(w)
        index, sample = ref_blending(w, size)
        picks = list(zip(index, sample, strict=True))[:num_samples]
    return [ref_text(*datasets[d], gpts[d], j, seq_len, extra) for d, j in picks]


def write_shards(folder: Path, tokens, sizes, parts: int, rng) -> str:
    """The sequences as ``parts`` Megatron datasets in ``folder`` (one source of several
    shards, cut between sequences, each shard holding tokens); returns the source path."""
    ends = np.cumsum(sizes)
    by_token: dict[int, int] = {}  # one cut per token position: no shard of 0 tokens
    for k in range(1, len(sizes)):
        if 0 < ends[k - 1] < ends[-1]:
            by_token.setdefault(int(ends[k - 1]), k)
    cuts = list(by_token.values())
    chosen = sorted(rng.choice(cuts, min(parts - 1, len(cuts)), replace=False).tolist())
    folder.mkdir()
    start = 0
    for part, (a, b) in enumerate(zip([0, *chosen], [*chosen, len(sizes)], strict=True)):
        with MegatronWriter(folder / f"part{part}", np.uint16) as writer:
            for n in sizes[a:b]:
                writer.add_document(tokens[start : start + n], lengths=[n])
                start += n
    return str(folder) if chosen else str(folder / "part0.bin")


@st.composite
def cases(draw):
    count = draw(st.integers(1, 3))
    lengths = [draw(st.lists(st.integers(0, 60), min_size=3, max_size=25)) for _ in range(count)]
    weighted = draw(st.booleans())
    weights = [draw(st.integers(1, 9)) / 4 for _ in range(count)] if weighted else None
    split = draw(st.sampled_from(["100,0,0", "80,20,0", "969,30,1"]))
    which = draw(st.sampled_from([0, 1] if split == "80,20,0" else [0]))
    seq_len = draw(st.integers(2, 23))
    extra = draw(st.integers(0, 1))
    drop = draw(st.booleans()) if which == 1 else True
    num_samples = draw(st.integers(1, 60))
    return (
        lengths,
        weights,
        split,
        which,
        num_samples,
        seq_len,
        draw(st.integers(0, 99)),
        extra,
        drop,
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
# A three-way exact tie at step 6 that only the second normalization decides (found by CI);
# the literal reading once normalized with ``sum()``, which moved with Python 3.12.
@example(([[0, 0, 4], [0, 0, 4], [0, 0, 4]], [1.5, 2.25, 0.75], "100,0,0", 0, 7, 2, 0, 0, True))
def test_stream_matches_the_literal_reading(case) -> None:
    lengths, weights, split, which, num_samples, seq_len, seed, extra, drop = case
    for sizes in lengths:  # the reference counts epochs one by one: keep E small
        bounds = split_ranges(split, len(sizes))[which]
        assume(bounds is not None and sum(sizes[bounds[0] : bounds[1]]) >= 2 * seq_len)
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as folder:
        sources, datasets = [], []
        for d, sizes in enumerate(lengths):
            tokens = rng.integers(0, 500, sum(sizes)).astype(np.uint16)
            path = write_shards(Path(folder) / f"d{d}", tokens, sizes, 1 + seed % 3, rng)
            sources.append({"name": f"d{d}", "path": path}
                           | ({} if weights is None else {"weight": weights[d]}))  # fmt: skip
            datasets.append((tokens.astype(np.int64), np.array(sizes, np.int32)))
        sampling = {"mode": "megatron", "split": split, "split_name": ["train", "valid"][which],
                    "num_samples": num_samples, "add_extra_token": bool(extra)}  # fmt: skip
        if not drop:
            sampling["drop_last_partial"] = False
        cfg = {"seq_len": seq_len, "seed": seed, "sources": sources, "sampling": sampling}
        try:
            want = reference(datasets, weights, split, which, num_samples, seq_len, seed, extra,
                             drop)  # fmt: skip
        except (AssertionError, ValueError, IndexError, ZeroDivisionError):
            want = None  # a case Megatron rejects: the stream must reject it too
        try:
            stream = SampleStream.from_config(load_config(cfg))
        except ConfigError:
            assume(False)  # empty split, tiny data: rejected by both (checked in unit tests)
            return
        assert want is not None
        got = stream.read(0, np.arange(stream.pass_length or 0))[0]
        assert got.tolist() == want
