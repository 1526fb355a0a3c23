"""Random config inputs for ``test_fuzz_config.py``, all from one ``random.Random``.

``valid_config`` draws a config that the rules of docs/config.md accept; ``mutate`` breaks it
(random types in any field, missing and extra keys, typos, nested garbage); the ``*_text``
functions print a config as TOML, YAML or JSON and ``damage`` garbles the text.
"""

from __future__ import annotations

import decimal
import json
import random
import string
from typing import Any

import numpy as np
import yaml

FIELDS = {
    "top": [
        "seq_len",
        "seed",
        "eos_token_id",
        "pad_token_id",
        "vocab_size",
        "global_batch_size",
        "sources",
    ],
    "sources": ["name", "path", "format", "dtype", "weight", "policy", "max_epochs"],
    "sampling": [
        "mode",
        "shuffle",
        "shuffle_block",
        "num_samples",
        "cross_shard",
        "split",
        "long_documents",
    ],
    "storage": ["cache_size", "block_size", "retries", "timeout", "window_reads", "client"],
}
"""Field names that typos are made of."""

_INTS = [0, 1, -1, 2, 7, 2**31, 2**32, 2**63 - 1, 2**63, -(2**63), 2**70, 10**400]
_FLOATS = [0.0, -0.0, 0.5, 1.0, 1.5, 1e-300, 5e-324, 1e308, 1.7e308, float("nan"), float("inf")]
_STRINGS = ["", "x", "auto", "npy", "raw", "megatron", "concat", "packed", "padded", "split",
            "truncate", "uint16", "repeat", "stop", "skip", "thread", "process", "spawn",
            "969,30,1", "/d", "a\x00b", "é", "\ufeff", "s3://b/p", "1", "true", "null",
            "9" * 400]  # fmt: skip


def scalar(rng: random.Random, python_only: bool = False) -> Any:
    """A random leaf: numbers at the edges, strings that are almost valid, odd types."""
    kind = rng.randrange(9 if python_only else 6)
    if kind == 0:
        return rng.choice(_INTS)
    if kind == 1:
        return rng.choice(_FLOATS)
    if kind == 2:
        return rng.choice(_STRINGS)
    if kind == 3:
        return rng.choice([True, False, None])
    if kind == 4:
        return rng.randint(-5, 5000)
    if kind == 5:
        return "".join(rng.choice(string.printable) for _ in range(rng.randrange(8)))
    if kind == 6:
        return rng.choice([b"x", (1, 2), {1, 2}, frozenset(), 1j, decimal.Decimal("1.5"), 10**5000])
    if kind == 7:
        return rng.choice([np.int64(4), np.float32(0.5), np.bool_(True), np.array([1])])
    return object()


def garbage(rng: random.Random, depth: int = 0, python_only: bool = False) -> Any:
    """A random value: a leaf, or a list or table of random values (nested up to 3)."""
    roll = rng.random()
    if depth >= 3 or roll < 0.6:
        return scalar(rng, python_only)
    if roll < 0.8:
        return [garbage(rng, depth + 1, python_only) for _ in range(rng.randrange(4))]
    return {key(rng): garbage(rng, depth + 1, python_only) for _ in range(rng.randrange(4))}


def key(rng: random.Random) -> str:
    """A random field name, a typo of a real one, or junk."""
    name = rng.choice([n for names in FIELDS.values() for n in names])
    roll = rng.randrange(4)
    if roll == 0:
        return name
    if roll == 1 and len(name) > 2:
        i = rng.randrange(len(name))
        return name[:i] + name[i + 1 :]
    if roll == 2:
        return name + rng.choice(["s", "_", "x"])
    return "".join(rng.choice(string.ascii_lowercase + "_-. ") for _ in range(rng.randint(1, 6)))


def valid_config(rng: random.Random) -> dict[str, Any]:
    """A config every rule accepts: concat, packed or padded (one source or a mixture), or
    megatron mode."""
    megatron = rng.random() < 0.25
    mode = "megatron" if megatron else rng.choice(["concat", "concat", "packed", "padded"])
    documents = mode in ("packed", "padded")
    count = rng.randint(1, 3)
    mixture = not megatron and (count > 1 or rng.random() < 0.2)
    weighted = mixture or (megatron and rng.random() < 0.5)
    sources = [_source(rng, f"s{i}", weighted, megatron) for i in range(count)]
    if weighted:
        sources[0]["weight"] = 2.0  # all weights 0 is an error
    cfg: dict[str, Any] = {"seq_len": rng.randint(2, 4096), "sources": sources}
    if rng.random() < 0.5:
        cfg["seed"] = rng.choice([0, 1, 2**32 - 1] + ([] if megatron else [2**63 - 1]))
    if rng.random() < 0.4 or megatron:
        cfg["eos_token_id"] = rng.randint(0, 99)
    if rng.random() < 0.3:
        cfg["vocab_size"] = rng.randint(100, 300_000)
    if documents or (not megatron and rng.random() < 0.15):
        # below every vocab_size drawn, and never an EOS (top level or a jsonl source's 0)
        eos = cfg.get("eos_token_id")
        cfg["pad_token_id"] = rng.choice([i for i in range(1, 100) if i != eos or not documents])
    if mixture or rng.random() < 0.3:
        cfg["global_batch_size"] = rng.randint(1, 4096)
    cfg["sampling"] = _sampling(rng, mode)
    if rng.random() < 0.5:
        masks = rng.random() < 0.5
        cfg["packing"] = {"masks": masks, "eod_mask_loss": masks and rng.random() < 0.5}
    if mixture and rng.random() < 0.5:
        units = ["samples"] if documents else ["samples", "tokens"]
        cfg["mixture"] = {"unit": rng.choice(units), "temperature": 0.5}
        names = [s["name"] for s in sources]
        cfg["schedule"] = [
            {"start_step": step, "weights": {n: rng.uniform(0, 3) + 0.01 for n in names}}
            for step in sorted(rng.sample(range(10_000), rng.randint(1, 3)))
        ]
    if rng.random() < 0.4:
        cfg["storage"] = {"retries": rng.randint(0, 9), "timeout": rng.uniform(0.1, 60),
                          "window_reads": rng.choice(["exact", "blocks"])}  # fmt: skip
    return cfg


def _source(rng: random.Random, name: str, weighted: bool, megatron: bool) -> dict[str, Any]:
    path = rng.choice(["/data/web", "rel/dir/", "s3://bucket/p", ["/a", "b/*.npy"], "./x"])
    source: dict[str, Any] = {"name": name, "path": path}
    if weighted:
        source["weight"] = rng.choice([0.0, 1, 0.3, 1e300, 5e-324]) if rng.random() < 0.3 else 1.0
    if rng.random() < 0.3:
        source["dtype"] = rng.choice(["auto", "uint16", "int32"])
    if rng.random() < 0.3:
        source["format"] = rng.choice(["auto", "npy", "raw", "megatron", "dolma"])
    if not megatron and rng.random() < 0.2:
        source["policy"], source["max_epochs"] = rng.choice(["repeat", "stop"]), rng.randint(1, 9)
    if rng.random() < 0.2:
        source["storage_options"] = {"anon": True, "client_kwargs": {"region_name": "x"}}
    if rng.random() < 0.1:
        source.update(format="jsonl", tokenizer="tok.json", eos_token_id=0, text_field="body")
    return source


def _sampling(rng: random.Random, mode: str) -> dict[str, Any]:
    if mode == "megatron":
        out: dict[str, Any] = {"mode": "megatron", "num_samples": rng.randint(1, 10**6)}
        out["split_name"] = rng.choice(["train", "valid", "test"])
        out["split"] = rng.choice(["969,30,1", "1,1,1", "100"])
        if out["split_name"] == "valid":
            out["drop_last_partial"] = rng.random() < 0.5
        return out
    documents = mode in ("packed", "padded")
    out = {"shuffle": rng.random() < 0.7, "cross_shard": documents or rng.random() < 0.7}
    if mode != "concat" or rng.random() < 0.2:
        out["mode"] = mode
    if rng.random() < 0.4:
        out["long_documents"] = rng.choice(["split", "truncate"] if documents else ["split"])
    if out["shuffle"] and rng.random() < 0.3:
        out["shuffle_block"] = rng.randint(1, 1000)
    if rng.random() < 0.4:
        out["num_samples"] = rng.randint(1, 10**9)
    return out


def mutate(rng: random.Random, cfg: Any, python_only: bool) -> Any:
    """Change one random spot: a new type or value, a missing or an extra key, a typo."""
    if not isinstance(cfg, (dict, list)) or rng.random() < 0.02:
        return garbage(rng, python_only=python_only)
    spots = _containers(cfg)
    spot = rng.choice(spots)
    if isinstance(spot, list):
        if spot and rng.random() < 0.5:
            spot[rng.randrange(len(spot))] = garbage(rng, python_only=python_only)
        else:
            spot.append(garbage(rng, python_only=python_only))
        return cfg
    roll = rng.randrange(4)
    if roll == 0 and spot:
        del spot[rng.choice(list(spot))]
    elif roll == 1 and spot:
        spot[rng.choice(list(spot))] = garbage(rng, python_only=python_only)
    elif roll == 2 and python_only:
        spot[rng.choice([1, None, (1,), 2.5])] = garbage(rng, python_only=python_only)
    else:
        spot[key(rng)] = garbage(rng, python_only=python_only)
    return cfg


def _containers(value: Any) -> list[Any]:
    out = [value]
    items = value.values() if isinstance(value, dict) else value
    for item in items:
        if isinstance(item, (dict, list)):
            out.extend(_containers(item))
    return out


def toml_text(value: dict[str, Any]) -> str:
    """A TOML document of a table (top-level tables and arrays of tables as sections)."""
    head, tail = [], []
    for name, item in value.items():
        if isinstance(item, dict) and item:
            tail.append(f"[{_toml_key(name)}]\n" + _toml_lines(item))
        elif isinstance(item, list) and item and all(isinstance(x, dict) for x in item):
            tail += [f"[[{_toml_key(name)}]]\n" + _toml_lines(x) for x in item]
        else:
            head.append(f"{_toml_key(name)} = {_toml_value(item)}")
    return "\n".join(head) + "\n" + "\n".join(tail)


def _toml_lines(table: dict[str, Any]) -> str:
    return "".join(f"{_toml_key(k)} = {_toml_value(v)}\n" for k, v in table.items())


def _toml_key(name: Any) -> str:
    text = str(name)
    bare = text and all(c.isascii() and (c.isalnum() or c in "_-") for c in text)
    return text if bare else json.dumps(text)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if value != value else ("inf" if value == float("inf") else repr(value))
    if isinstance(value, (int, str)):
        return json.dumps(value) if isinstance(value, str) else str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    return '"none"'  # TOML has no null


def yaml_text(value: Any) -> str:
    """A YAML document (block or flow style at random)."""
    return yaml.safe_dump(value, default_flow_style=None, allow_unicode=True, sort_keys=False)


def json_text(value: Any) -> str:
    """A JSON document (NaN and Infinity as Python's ``json`` writes them)."""
    return json.dumps(value, indent=1)


_DAMAGE = "=[]{}\"',:#-&*!|>%@`\\\n\t \x00\x07é\ufeff0.9eE+"


def damage(rng: random.Random, text: str) -> str:
    """Garble a text: delete, insert, duplicate or swap pieces, or cut it short."""
    for _ in range(rng.randint(1, 3)):
        roll, n = rng.randrange(5), len(text)
        i = rng.randrange(n + 1)
        if roll == 0:
            text = text[:i] + text[i + rng.randint(1, 8) :]
        elif roll == 1:
            text = (
                text[:i] + "".join(rng.choice(_DAMAGE) for _ in range(rng.randint(1, 4))) + text[i:]
            )
        elif roll == 2:
            lines = text.splitlines(keepends=True) or [""]
            j = rng.randrange(len(lines))
            lines.insert(j, lines[rng.randrange(len(lines))])
            text = "".join(lines)
        elif roll == 3:
            lines = text.splitlines(keepends=True)
            rng.shuffle(lines)
            text = "".join(lines)
        else:
            text = text[:i]
    return text
