"""Write the megatron-core golden index arrays of ``tests/golden/megatron/*.npz``.

Builds real ``GPTDataset`` / ``BlendedDataset`` indices with megatron-core over two small
IndexedDatasets written by :class:`streamload.formats.megatron.MegatronWriter`, and saves the
arrays with the inputs that produced them. ``tests/streams/test_megatron_goldens.py`` checks
that ``streamload.plan.megatron`` and ``megatron_blend`` reproduce every array exactly. The cases
of :data:`SAMPLE_CASES` also save the ``text`` array of every sample
(``tests/streams/test_megatron.py`` reads them through the stream, the CLI and the loader);
``masks_*`` save ``GPTDataset.__getitem__`` outputs with the mask switches
(``tests/ops/test_megatron_masks.py``); ``megatron_cache/`` holds megatron-core's own cache files
of one case (``tests/streams/test_megatron_cache.py``).

megatron-core must not go into the project venv; install it aside and put it on the path::

    pip install --target /tmp/mcore megatron-core==0.16.1
    PYTHONPATH=/tmp/mcore python tests/golden/make_megatron_goldens.py

Each case builds in a fresh directory: megatron caches GPT indices next to the data under a
hash that leaves out ``add_extra_token_to_sequence`` and
``drop_last_partial_validation_sequence`` (FORMATS §2.9), so a shared cache would hand one
case the arrays of another. Blends get no ``path_to_cache``: with one, 0.16.1 calls
``torch.distributed.get_rank()`` unconditionally (FORMATS §2.11).
"""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from streamload.formats.megatron.megatron import MegatronWriter

OUT = Path(__file__).parent / "megatron"
SEQ_LEN = 16
SEED = 1234
EOD = 0
"""Every non-empty sequence ends with it (Megatron-LM's ``--append-eod``)."""
SAMPLE_CASES = (
    "gpt_e1_n",
    "gpt_e3_separate",
    "gpt_e2_not_separate",
    "gpt_e3_seed7",
    "gpt_seq7_e3",
    "gpt_no_extra_e2",
    "gpt_split_valid",
    "gpt_split_valid_keep_last",
    "blend_train",
    "blend_valid",
    "blend_unweighted_size",
)
"""Cases whose ``text`` arrays are saved too (every sample of the dataset)."""


def dataset_lengths() -> dict[str, np.ndarray]:
    """Sequence lengths of the two datasets (A has two empty sequences)."""
    a = np.random.default_rng(11).integers(1, 40, 97)
    a[[20, 55]] = 0
    b = np.random.default_rng(12).integers(5, 90, 64)
    return {"A": a.astype(np.int32), "B": b.astype(np.int32)}


class GoldenTokenizer:
    """The few tokenizer attributes a GPTDataset reads (vocab_size None: no dtype override).

    No ``pad``: megatron-core then pads a short last sample with -1, as streamload does.
    """

    unique_identifiers = {"class": "GoldenTokenizer"}  # noqa: RUF012 - read by json.dumps
    vocab_size = None
    eod = EOD


def write_datasets(folder: Path) -> dict[str, str]:
    """Write A and B as uint16 Megatron datasets in ``folder``; returns their prefixes."""
    prefixes = {}
    for name, lengths in dataset_lengths().items():
        prefix = folder / f"{name}_text_document"
        tokens = np.random.default_rng(len(lengths)).integers(1, 1000, int(lengths.sum()))
        ends = np.cumsum(lengths)[lengths > 0] - 1
        tokens[ends] = EOD
        with MegatronWriter(prefix, np.uint16) as writer:
            start = 0
            for n in lengths.tolist():
                writer.add_document(tokens[start : start + n], lengths=[n])
                start += n
        prefixes[name] = str(prefix)
    return prefixes


def build(blend: tuple[list[str], list[float] | None], split: str, sizes: list, **opts: Any):
    """Run ``BlendedMegatronDatasetBuilder(GPTDataset, sizes, ...)`` in a fresh directory."""
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    with tempfile.TemporaryDirectory() as tmp:
        prefixes = write_datasets(Path(tmp))
        config = GPTDatasetConfig(
            random_seed=opts.pop("seed", SEED),
            sequence_length=opts.pop("seq_len", SEQ_LEN),
            blend=([prefixes[name] for name in blend[0]], blend[1]),
            split=split,
            tokenizer=GoldenTokenizer(),
            **(
                {"reset_position_ids": False, "reset_attention_mask": False, "eod_mask_loss": False}
                | opts
            ),
        )
        return BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, config).build()


def cache_fixture() -> None:
    """megatron-core's own cache files for dataset A (train, E=3), for the cache reader test."""
    folder = OUT.parent / "megatron_cache"
    for old in folder.glob("*"):
        old.unlink()
    build((["A"], None), "100,0,0", [epoch_requests(SEQ_LEN)["e3_sep"], 0, 0],
          path_to_cache=str(folder))  # fmt: skip
    print(f"megatron_cache: {sorted(p.name for p in folder.iterdir())}")


def gpt_arrays(dataset: Any, prefix: str = "") -> dict[str, np.ndarray]:
    """The arrays of one GPTDataset (and its inputs), keys prefixed by ``prefix``."""
    return {
        f"{prefix}sequence_lengths": np.asarray(dataset.dataset.sequence_lengths),
        f"{prefix}indices": np.asarray(dataset.indices),
        f"{prefix}document_index": np.asarray(dataset.document_index),
        f"{prefix}sample_index": np.asarray(dataset.sample_index),
        f"{prefix}shuffle_index": np.asarray(dataset.shuffle_index),
    }


def save(name: str, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    np.savez_compressed(OUT / f"{name}.npz", meta=np.array(json.dumps(meta)), **arrays)
    print(f"{name}: {', '.join(f'{k}{list(v.shape)}' for k, v in arrays.items())}")


def gpt_case(name: str, split: str, sizes: list, which: int = 0, **opts: Any) -> None:
    """One GPT split of dataset A."""
    meta = {
        "kind": "gpt",
        "split": split,
        "split_index": which,
        "num_samples": sizes[which],
        "seq_len": opts.get("seq_len", SEQ_LEN),
        "seed": opts.get("seed", SEED),
        "add_extra_token": opts.get("add_extra_token_to_sequence", True),
        "drop_last_partial": True
        if which != 1
        else opts.get("drop_last_partial_validation_sequence", True),
    }
    dataset = build((["A"], None), split, sizes, **opts)[which]
    meta["len"] = len(dataset)
    arrays = gpt_arrays(dataset)
    if name in SAMPLE_CASES:
        arrays["text"] = texts(dataset, None)
    save(name, meta, arrays)


def texts(dataset: Any, blended: Any) -> np.ndarray:
    """The ``text`` array of every sample (through the blend's two arrays when blended)."""
    rows = []
    for i in range(len(blended if blended is not None else dataset)):
        if blended is not None:
            gpt = blended.datasets[blended.dataset_index[i]]
            j = int(blended.dataset_sample_index[i])
        else:
            gpt, j = dataset, i
        rows.append(gpt._query_document_sample_shuffle_indices(j)[0])
    return np.stack(rows).astype(np.int64)


def mask_case(name: str, flags: tuple[bool, bool, bool], count: int = 24) -> None:
    """``GPTDataset.__getitem__`` outputs with mask switches (dense attention mask, small)."""
    position, attention, loss = flags
    dataset = build(
        (["A"], None),
        "100,0,0",
        [count, 0, 0],
        reset_position_ids=position,
        reset_attention_mask=attention,
        eod_mask_loss=loss,
        create_attention_mask=True,
    )[0]
    items = [dataset[i] for i in range(count)]
    arrays = {
        key: np.stack([item[key].numpy() for item in items])
        for key in ("tokens", "labels", "loss_mask", "position_ids", "attention_mask")
    }
    arrays["text"] = texts(dataset, None)[:count]
    meta = {"kind": "masks", "flags": list(flags), "num_samples": count, "seq_len": SEQ_LEN,
            "seed": SEED, "eod": EOD}  # fmt: skip
    save(name, meta, arrays)


def blend_case(name: str, weights: list[float] | None, split: str, sizes: list, which: int = 0):
    """One split of a blend of A and B."""
    blended = build((["A", "B"], weights), split, sizes)[which]
    arrays = {
        "dataset_index": np.asarray(blended.dataset_index),
        "dataset_sample_index": np.asarray(blended.dataset_sample_index),
    }
    for d, dataset in enumerate(blended.datasets):
        arrays |= gpt_arrays(dataset, f"ds{d}_")
    if name in SAMPLE_CASES:
        arrays["text"] = texts(None, blended)
    meta = {
        "kind": "blend",
        "weights": weights,
        "split": split,
        "split_index": which,
        "size": sizes[which],
        "seq_len": SEQ_LEN,
        "seed": SEED,
        "blend_weights": list(blended.weights),
        "blend_size": blended.size,
        "num_samples": [dataset.num_samples for dataset in blended.datasets],
    }
    save(name, meta, arrays)


def epoch_requests(seq_len: int, extra: int = 1) -> dict[str, int]:
    """num_samples giving E=3 with a separate last epoch, and E=2 without, for dataset A."""
    tpe = int(dataset_lengths()["A"].sum())
    per = (tpe - extra) // seq_len
    sans3 = (2 * tpe - extra) // seq_len
    sans2 = (tpe - extra) // seq_len
    return {"e3_sep": sans3 + per // 4, "e2_nosep": sans2 + (9 * per) // 10, "e1": per // 2}


def main() -> None:
    warnings.filterwarnings("ignore")
    OUT.mkdir(parents=True, exist_ok=True)
    req = epoch_requests(SEQ_LEN)
    gpt_case("gpt_e1", "100,0,0", [None, None, None])
    gpt_case("gpt_e1_n", "100,0,0", [req["e1"], 0, 0])
    gpt_case("gpt_e3_separate", "100,0,0", [req["e3_sep"], 0, 0])
    gpt_case("gpt_e2_not_separate", "100,0,0", [req["e2_nosep"], 0, 0])
    gpt_case("gpt_e3_seed7", "100,0,0", [req["e3_sep"], 0, 0], seed=7)
    odd = epoch_requests(7)
    gpt_case("gpt_seq7_e3", "100,0,0", [odd["e3_sep"], 0, 0], seq_len=7)
    plain = epoch_requests(SEQ_LEN, extra=0)
    gpt_case(
        "gpt_no_extra_e2", "100,0,0", [plain["e2_nosep"], 0, 0], add_extra_token_to_sequence=False
    )
    gpt_case("gpt_split_train", "90,8,2", [100, 30, 10], which=0)
    gpt_case("gpt_split_valid", "90,8,2", [100, 30, 10], which=1)
    gpt_case("gpt_split_test", "90,8,2", [100, 30, 10], which=2)
    gpt_case(
        "gpt_split_valid_keep_last",
        "90,8,2",
        [100, None, 10],
        which=1,
        drop_last_partial_validation_sequence=False,
    )
    blend_case("blend_train", [0.7, 0.3], "100,0,0", [300, 0, 0])
    blend_case("blend_valid", [2.0, 1.0], "90,8,2", [300, 40, 10], which=1)
    blend_case("blend_exhaustive", None, "100,0,0", [None, None, None])
    blend_case("blend_unweighted_size", None, "100,0,0", [50, None, None])
    mask_case("masks_all", (True, True, True))
    mask_case("masks_positions_only", (True, False, False))
    mask_case("masks_attention_loss", (False, True, True))
    cache_fixture()


if __name__ == "__main__":
    main()
