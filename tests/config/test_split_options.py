"""``sampling.split`` / ``split_name`` in every mode, and the evaluation loader's sampling."""

from __future__ import annotations

from typing import Any

import pytest

from streamload.config import DataConfig, SamplingConfig, load_config
from streamload.config.options import MEGATRON_DEFAULT_SPLIT, MegatronSplit, evaluation_sampling
from streamload.errors import ConfigError

MODES = ["concat", "packed", "padded"]


def config(mode: str = "concat", **sampling: Any) -> dict[str, Any]:
    return {
        "seq_len": 8,
        "eos_token_id": 0,
        **({"pad_token_id": 1} if mode in ("packed", "padded") else {}),
        "sampling": {"mode": mode, **sampling},
        "sources": [{"name": "web", "path": "/data/web"}],
    }


@pytest.mark.parametrize("mode", MODES)
def test_no_split_unless_one_is_set(mode: str) -> None:
    """The default of the other modes is no split, and it is not printed."""
    cfg = load_config(config(mode))
    assert cfg.sampling.split is None and cfg.sampling.split_name is MegatronSplit.TRAIN
    assert "split" not in cfg.to_dict()["sampling"]


def test_megatron_mode_keeps_megatrons_default_split() -> None:
    cfg = load_config(config("megatron", num_samples=10))
    assert cfg.sampling.split == MEGATRON_DEFAULT_SPLIT == cfg.sampling.megatron_split


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["train", "valid", "test"])
def test_a_split_is_read_in_every_mode(mode: str, name: str) -> None:
    cfg = load_config(config(mode, split="98,2,0", split_name=name))
    assert (cfg.sampling.split, cfg.sampling.split_name.value) == ("98,2,0", name)
    assert DataConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    ("sampling", "match"),
    [
        (
            {"split_name": "valid"},
            r"sampling\.split_name = 'valid' needs sampling\.split \(e\.g\. split = '98,2,0'\)",
        ),
        ({"split": 5}, r"sampling\.split = 5 must be a string like '969,30,1'"),
        ({"split": "1,2,3,4"}, r"split '1,2,3,4': expected up to 3 non-negative weights"),
        ({"split": "0,0"}, r"with a positive sum"),
        ({"split": "9" * 400}, r"holds a number too large for a float"),
        ({"split_name": "dev"}, r"sampling\.split_name = 'dev' is not one of 'train'"),
    ],
)
def test_bad_splits_are_refused(sampling: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(config("concat", **sampling))


def test_the_evaluation_sampling_rule() -> None:
    """Unshuffled unless asked, no num_samples (a pass is the split), the split read set."""
    base = SamplingConfig(split="98,2,0", shuffle_block=16, num_samples=1000)
    plain = evaluation_sampling(base, "valid")
    assert (plain.split_name, plain.shuffle, plain.shuffle_block, plain.num_samples) == (
        MegatronSplit.VALID, False, 0, None,
    )  # fmt: skip
    shuffled = evaluation_sampling(base, "test", shuffle=True)
    assert (shuffled.split_name, shuffled.shuffle, shuffled.shuffle_block) == (
        MegatronSplit.TEST, True, 16,
    )  # fmt: skip
    with pytest.raises(ConfigError, match=r"split = 'dev' is not one of"):
        evaluation_sampling(base, "dev")
    with pytest.raises(ConfigError, match=r"shuffle = 'yes' must be"):
        evaluation_sampling(base, "valid", shuffle="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"split_name = 'valid' needs sampling\.split"):
        evaluation_sampling(SamplingConfig(), "valid")
    assert evaluation_sampling(SamplingConfig(), "train").split is None  # the whole data


def test_megatron_evaluation_keeps_megatrons_order() -> None:
    base = SamplingConfig(mode="megatron", num_samples=100)
    valid = evaluation_sampling(base, "valid")
    assert (valid.split_name, valid.num_samples, valid.shuffle) == (MegatronSplit.VALID, 100, True)
    with pytest.raises(ConfigError, match=r"shuffle = False has no meaning with mode = 'megatron'"):
        evaluation_sampling(base, "valid", shuffle=False)
