"""``streamload show`` on packed SFT conversations: the tokens not trained as targets (the
prompt, each conversation's first token) are bracketed ``[- -]``; pretraining text shows no
brackets (tests/cli/test_show.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamload import build_loader
from streamload.cli.main import main
from streamload.tools.show_text import untrained_tokens
from tests.helpers.paths import TESTS

TRL = TESTS / "fixtures" / "trl_packing"
IGNORE = -100


@pytest.fixture
def config(tmp_path: Path) -> Path:
    cfg = {
        "seq_len": 39, "seed": 3, "pad_token_id": 2, "vocab_size": 300,
        "sources": [{"name": "chat", "path": str(TRL / "*.jsonl")}],
        "sampling": {"mode": "packed", "long_documents": "truncate", "shuffle": False},
        "packing": {"masks": True},
    }  # fmt: skip
    path = tmp_path / "sft.json"
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.filterwarnings("ignore:each pass of")
def test_prompt_tokens_are_bracketed(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    batch = next(iter(build_loader(str(config), batch_size=1)))
    ids, labels = batch["input_ids"][0].tolist(), batch["labels"][0].tolist()
    assert (
        main(["show", str(config), "--step", "0", "--batch-size", "1", "--max-tokens", "64"]) == 0
    )
    out = capsys.readouterr().out
    trained = sum(label != IGNORE for label in labels)
    assert f"trained labels {trained} of 39; [- -] marks the tokens not trained" in out
    # the row's first conversation opens with an untrained run: its prompt
    first_trained = next(t for t in range(1, 39) if labels[t - 1] != IGNORE)
    prompt = " ".join(map(str, ids[:first_trained]))
    assert f"      [-{prompt}-] {ids[first_trained]} " in out


def test_untrained_tokens_follow_the_labels() -> None:
    sample = {
        "labels": [IGNORE, 7, 8, IGNORE, IGNORE, 3],
        "skipped": False,
        "documents": [{"start": 0, "end": 4, "kind": "document"},
                      {"start": 4, "end": 6, "kind": "document"}],
    }  # fmt: skip
    assert untrained_tokens(sample) == [True, True, False, False, True, True]
    sample["labels"] = [5, 7, 8, IGNORE, 2, 3]  # only the boundary: nothing to mark
    assert untrained_tokens(sample) is None
