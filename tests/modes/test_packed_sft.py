"""Packed SFT (issue 33, item 3): conversations with prompt masks packed as TRL packs them.

``tests/fixtures/trl_packing`` holds 22 conversations (``train.jsonl``) and what TRL made of
them (``expected.json``): ``pack_dataset(strategy="bfd", seq_length=40)`` rows collated by
``DataCollatorForLanguageModeling(padding_free=True)``, whose labels are the unshifted copy
(the model shifts) with -100 on prompts and on each conversation's first token, and whose
position ids restart per conversation. TRL and streamload bin conversations differently, so
the comparison is per conversation: wherever streamload puts one (at input position ``p``,
``m`` positions), its ``position_ids[p:p + m]`` are TRL's for it and its ``labels[p + k]``
are TRL's label ``k + 1`` of it (-100 past its end: the next conversation's first token or
padding); padding is -100; ``cu_seqlens`` are where the position ids restart (as
flash-attention's varlen path derives them from TRL's position ids); and one epoch trains
exactly the labels TRL trains.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from streamload import build_loader
from streamload.testing import assert_resumes_exactly, collect_global_batches
from tests.helpers.paths import TESTS

TRL = TESTS / "fixtures" / "trl_packing"
EXPECTED: dict[str, Any] = json.loads((TRL / "expected.json").read_text())
SEQ_LEN = EXPECTED["seq_length"] - 1
IGNORE, PAD = -100, 2
pytestmark = pytest.mark.filterwarnings("ignore:each pass of")


def trl_conversations() -> list[dict[str, list[int]]]:
    """Each conversation as TRL's packed rows hold it (truncated to 32 tokens where longer):
    its tokens, its labels and position ids."""
    out = []
    for row in EXPECTED["rows"]:
        starts = [i for i, p in enumerate(row["position_ids"]) if p == 0] + [len(row["labels"])]
        for a, b in itertools.pairwise(starts):
            out.append({key: row[key][a:b] for key in ("input_ids", "labels", "position_ids")})
    return out


def config(mode: str = "packed", long_documents: str = "truncate", **sampling: Any) -> dict:
    return {
        "seq_len": SEQ_LEN,
        "seed": 3,
        "pad_token_id": PAD,
        "vocab_size": 300,
        "sources": [{"name": "chat", "path": str(TRL / "*.jsonl")}],
        "sampling": {"mode": mode, "long_documents": long_documents, "shuffle": False, **sampling},
        "packing": {"masks": True},
    }


def epoch(cfg: dict[str, Any]) -> list[dict[str, torch.Tensor]]:
    with build_loader(cfg, batch_size=1) as loader:
        n = loader.stream.pass_length
        return collect_global_batches([loader])[:n]


def segments(batch: dict[str, torch.Tensor]) -> list[tuple[int, int]]:
    cuts = batch["cu_seqlens"][0].tolist()
    return [(a, b) for a, b in itertools.pairwise(cuts) if b > a]


def find(convs: list[dict[str, list[int]]], tokens: list[int]) -> dict[str, list[int]]:
    (found,) = [c for c in convs if c["input_ids"][: len(tokens)] == tokens]
    return found


def test_each_conversation_is_labelled_and_positioned_as_trl_packs_it() -> None:
    convs, seen = trl_conversations(), 0
    for batch in epoch(config()):
        ids, labels = batch["input_ids"][0].tolist(), batch["labels"][0].tolist()
        positions = batch["position_ids"][0].tolist()
        for a, b in segments(batch):
            if set(ids[a:b]) == {PAD}:  # the padding segment: nothing trained
                assert set(labels[a:b]) == {IGNORE} and b == SEQ_LEN
                continue
            trl = find(convs, ids[a:b])
            assert positions[a:b] == trl["position_ids"][: b - a]
            shifted = [*trl["labels"][1:], IGNORE]  # past its end: another's first token
            assert labels[a:b] == shifted[: b - a]
            seen += 1
    assert seen == len(convs) == 22


def test_cu_seqlens_are_where_the_position_ids_restart() -> None:
    for batch in epoch(config()):
        positions = batch["position_ids"][0]
        restarts = [*torch.nonzero(positions == 0).flatten().tolist(), SEQ_LEN]
        cuts = sorted(set(batch["cu_seqlens"][0].tolist()))
        assert cuts == restarts


def test_an_epoch_trains_exactly_the_labels_trl_trains() -> None:
    want = sum(label != IGNORE for row in EXPECTED["rows"] for label in row["labels"])
    got = sum(int((b["labels"] != IGNORE).sum()) for b in epoch(config()))
    assert got == want
    with build_loader(config(), batch_size=1) as loader:
        report = loader.stream.sources[0].packing_report()
    assert report["trained_tokens"] == want
    assert report["label_tokens"] == report["samples"] * SEQ_LEN
    assert (report["truncated_documents"], report["dropped_documents"]) == (2, 0)


def test_padded_gives_one_conversation_per_row() -> None:
    batches = epoch(config("padded"))
    assert len(batches) == 22
    convs = trl_conversations()
    for batch in batches:
        (first, *rest) = segments(batch)
        ids = batch["input_ids"][0].tolist()
        trl = find(convs, ids[first[0] : first[1]])
        want = [*trl["labels"][1:], IGNORE][: first[1]]
        assert batch["labels"][0].tolist()[: first[1]] == want
        assert all(set(ids[a:b]) == {PAD} for a, b in rest)


def test_drop_leaves_long_conversations_out_and_counts_them() -> None:
    rows = [json.loads(line) for line in (TRL / "train.jsonl").read_text().splitlines()]
    long = [len(r["input_ids"]) for r in rows if len(r["input_ids"]) > SEQ_LEN + 1]
    with build_loader(config(long_documents="drop"), batch_size=1) as loader:
        report = loader.stream.sources[0].packing_report()
    assert (report["dropped_documents"], report["dropped_tokens"]) == (2, sum(long))
    assert (report["documents"], report["items"], report["truncated_documents"]) == (22, 20, 0)
    kept = [
        batch["input_ids"][0].tolist()[a:b]
        for batch in epoch(config(long_documents="drop"))
        for a, b in segments(batch)
    ]
    kept = [ids for ids in kept if set(ids) != {PAD}]
    assert len(kept) == 20
    assert not any(find(trl_conversations(), ids)["input_ids"][:5] == r["input_ids"][:5]
                   for ids in kept for r in rows if len(r["input_ids"]) in long)  # fmt: skip


def test_packed_sft_resumes_exactly() -> None:
    cfg = config(shuffle=True)
    assert_resumes_exactly(lambda: build_loader(cfg, batch_size=2), passes=2)


def test_a_state_saved_on_one_rank_resumes_on_two() -> None:
    cfg = {**config(shuffle=True), "global_batch_size": 2}
    with build_loader(cfg, batch_size=2) as whole:
        reference = [b["input_ids"] for b in whole]
    with build_loader(cfg, batch_size=2) as first:
        next(iter(first))
        state = first.state_dict()
    ranks = [build_loader(cfg, batch_size=1, rank=r, world_size=2) for r in range(2)]
    for loader in ranks:
        loader.load_state_dict(state)
    rest = [torch.cat([a["input_ids"], b["input_ids"]]) for a, b in zip(*ranks, strict=True)]
    assert len(reference) >= 3 and len(rest) == len(reference) - 1
    for step, joined in enumerate(rest, start=1):
        assert torch.equal(joined, reference[step]), step


def test_padded_with_drop_resumes_exactly() -> None:
    cfg = config("padded", "drop", shuffle=True)
    assert_resumes_exactly(lambda: build_loader(cfg, batch_size=3), passes=2)


def test_plan_prints_and_reports_the_fine_tuners_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from streamload.cli.main import main

    path = tmp_path / "sft.json"
    path.write_text(json.dumps(config(long_documents="drop")))
    assert main(["plan", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["packing"]["chat"]
    with build_loader(config(long_documents="drop"), batch_size=1) as loader:
        assert report == loader.stream.sources[0].packing_report()
    assert report["label_tokens"] == report["samples"] * SEQ_LEN > report["trained_tokens"] > 0
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    share = 100.0 * report["trained_tokens"] / report["label_tokens"]
    assert f"trained labels {report['trained_tokens']:,} of {report['label_tokens']:,} " in out
    assert f"({share:.2f} %); documents truncated 0, dropped 2 (" in out
