"""``streamload tokenize``: JSONL documents → token files, with ``dolma tokens``' options.

Every option takes dolma's spelling (``--tokenizer.name_or_path``, ``--max_size``,
``--work_dir.input``…) and the kebab-case one (``--tokenizer``, ``--max-size``…). ``-c FILE``
reads a JSON/YAML/TOML config (dolma's nested tables or flat names); options given on the
command line win. Restarting with the same arguments finishes an interrupted run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from streamload.errors import ConfigError
from streamload.tokenize.config import (
    OutputFormat,
    TokenizeConfig,
    check_jsonl_options,
    flatten_options,
    load_tokenize_config,
)

__all__ = ["add_parser", "run"]

_OPTIONS: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (("--documents",), {"nargs": "+", "help": "input JSONL paths or globs (.gz/.zst too)"}),
    (("--destination",), {"help": "output folder"}),
    (
        ("--tokenizer", "--tokenizer.name_or_path", "--tokenizer-name-or-path"),
        {"help": "path of a HuggingFace tokenizer.json"},
    ),
    (
        ("--bos-token-id", "--tokenizer.bos_token_id", "--bos_token_id"),
        {"type": int, "help": "token id prepended to each document that does not start with it"},
    ),
    (
        ("--eos-token-id", "--tokenizer.eos_token_id", "--eos_token_id"),
        {"type": int, "help": "token id appended to each document that does not end with it"},
    ),
    (
        ("--pad-token-id", "--tokenizer.pad_token_id", "--pad_token_id"),
        {"type": int, "help": "padding id, recorded only (as dolma); must fit the dtype"},
    ),
    (
        (
            "--segment-before-tokenization",
            "--tokenizer.segment_before_tokenization",
            "--segment_before_tokenization",
        ),
        {"action": argparse.BooleanOptionalAction, "help": "tokenize paragraph by paragraph"},
    ),
    (
        ("--format",),
        {
            "choices": [*(f.value for f in OutputFormat), "jsonl"],
            "help": "default: dolma; jsonl prepares the inputs as a jsonl source instead",
        },
    ),
    (("--dtype",), {"help": "token dtype (default: the smallest that holds the vocabulary)"}),
    (("--max-size", "--max_size"), {"type": int, "help": "tokens per file (fewer than this)"}),
    (("--processes",), {"type": int, "help": "worker processes (default 1)"}),
    (
        ("--files-per-process", "--files_per_process"),
        {
            "type": int,
            "help": "input files per group, one set of outputs each (default: the files "
            "spread over --processes groups)",
        },
    ),
    (("--ring-size", "--ring_size"), {"type": int, "help": "files open at once (default 8)"}),
    (("--batch-size", "--batch_size"), {"type": int, "help": "documents per shuffle (10000)"}),
    (("--seed",), {"type": int, "help": "seed of the file order and batch shuffles"}),
    (
        ("--keep-order", "--keep_order"),
        {
            "action": argparse.BooleanOptionalAction,
            "help": "write the documents in input order, one group per input file, no "
            "shuffle (refused with --files-per-process and --ring-size)",
        },
    ),
    (("--text-field", "--text_field"), {"help": "JSON key of the text (default: text)"}),
    (("--id-field", "--id_field"), {"help": "JSON key of the id (default: id; '': none)"}),
    (
        ("--loss-spans-field", "--loss_spans_field"),
        {
            "help": "JSON key of each document's trained [start, end) character spans: write "
            "a loss mask beside every output file (default: none)"
        },
    ),
    (
        ("--messages-field", "--messages_field"),
        {
            "help": "JSON key of each document's chat messages [{role, content}, ...]: render "
            "them with the tokenizer's chat template and write a loss mask (docs/tokenize.md)"
        },
    ),
    (
        ("--chat-template", "--chat_template"),
        {
            "help": "chat template file (.jinja, or a tokenizer_config.json); default: the "
            "tokenizer's own, beside its tokenizer.json"
        },
    ),
    (
        ("--train-on", "--train_on"),
        {
            "choices": ["assistant", "last", "all"],
            "help": "a conversation's trained tokens: the assistant turns (default), the "
            "last one, or all",
        },
    ),
    (
        ("--work-dir.input", "--work_dir.input", "--work-dir-input"),
        {
            "dest": "work_dir_input",
            "help": "accepted for dolma compatibility (inputs are streamed, not copied)",
        },
    ),
    (
        ("--work-dir.output", "--work_dir.output", "--work-dir-output"),
        {"dest": "work_dir_output", "help": "scratch folder for files being written"},
    ),
    (("--shard-index",), {"type": int, "help": "this machine's share (default 0)"}),
    (("--num-shards",), {"type": int, "help": "machines sharing the run (default 1)"}),
    (
        ("--skip-bad-lines",),
        {"action": argparse.BooleanOptionalAction, "help": "skip malformed lines, count them"},
    ),
)


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    p = sub.add_parser(
        "tokenize", help="tokenize JSONL documents into token files (like dolma tokens)"
    )
    p.add_argument("-c", "--config", help="JSON/YAML/TOML file of options")
    p.add_argument("--dryrun", action="store_true", help="print the resolved run and exit")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="show a progress bar (default: on)",
    )
    for flags, kwargs in _OPTIONS:
        p.add_argument(*flags, default=None, **kwargs)
    p.set_defaults(run=run)


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The config file's values overridden by the options given (flat names)."""
    data = flatten_options(load_tokenize_config(args.config)) if args.config else {}
    for flags, kwargs in _OPTIONS:
        name = kwargs.get("dest") or flags[0].lstrip("-").replace("-", "_")
        value = getattr(args, name)
        if value is not None:
            data[name] = value
    return data


def config_from_args(args: argparse.Namespace) -> TokenizeConfig:
    """The run described by the config file and the options."""
    return TokenizeConfig.from_dict(_options(args))


def _prepare_jsonl(data: dict[str, Any], dryrun: bool = False) -> int:
    """``--format jsonl``: index and measure each input for a ``format = "jsonl"`` source
    (``dryrun``: only name the files it would prepare)."""
    from streamload.formats.jsonl.jsonl import prepare_jsonl
    from streamload.tokenize.inputs import expand_documents

    check_jsonl_options(data)
    docs = data["documents"]
    for path in expand_documents((docs,) if isinstance(docs, str) else tuple(docs)):
        if not path.endswith(".jsonl") or "://" in path:
            raise ConfigError(
                f"{path}: a jsonl source is a local, uncompressed .jsonl file (it is read by "
                "byte range)"
            )
        if dryrun:
            print(f'would prepare {path} for format = "jsonl"')
            continue
        record = prepare_jsonl(
            path,
            data["tokenizer"],
            bos_token_id=data.get("bos_token_id"),
            eos_token_id=data.get("eos_token_id"),
            text_field=data.get("text_field") or "text",
        )
        print(f'prepared {path} for format = "jsonl": {record}')
    return 0


class _Bar:
    """Documents and tokens written, with tokens/s (tqdm when installed)."""

    def __init__(self, enabled: bool) -> None:
        self.documents = self.tokens = 0
        self._start = self._last = time.monotonic()
        self._bar: Any = None
        if enabled:
            try:
                from tqdm import tqdm

                self._bar = tqdm(unit=" docs", unit_scale=True, file=sys.stderr)
            except ImportError:  # pragma: no cover - tqdm is in the progress extra
                pass
        self._enabled = enabled

    def __call__(self, documents: int, tokens: int) -> None:
        self.documents += documents
        self.tokens += tokens
        rate = self.tokens / max(time.monotonic() - self._start, 1e-9)
        if self._bar is not None:
            self._bar.update(documents)
            self._bar.set_postfix(tokens=f"{self.tokens:,}", tok_s=f"{rate:,.0f}", refresh=False)
        elif self._enabled and time.monotonic() - self._last >= 5:
            self._last = time.monotonic()
            print(f"{self.documents:,} documents, {self.tokens:,} tokens, {rate:,.0f} tokens/s")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def run(args: argparse.Namespace) -> int:
    """Tokenize; returns the exit code."""
    from streamload.tokenize.run import plan_run, run_plan

    data = _options(args)
    if data.get("format") == "jsonl":
        return _prepare_jsonl(data, dryrun=args.dryrun)
    config = TokenizeConfig.from_dict(data)
    plan = plan_run(config, claim=not args.dryrun)
    if args.dryrun:
        print(json.dumps(plan.describe(), indent=2))
        return 0
    bar = _Bar(args.progress)
    try:
        summary = run_plan(plan, bar)
    finally:
        bar.close()
    rate = summary.tokens / max(summary.seconds, 1e-9)
    print(
        f"tokenized {summary.documents:,} documents into {summary.tokens:,} tokens "
        f"({plan.dtype}, {config.format.value}) in {summary.files:,} files under "
        f"{config.destination}: {summary.groups_written} groups written, "
        f"{summary.groups_skipped} already done; {summary.seconds:.1f} s, {rate:,.0f} tokens/s"
    )
    if summary.empty:
        print(f"skipped {summary.empty:,} documents with empty text")
    if summary.bad:
        print(f"skipped {summary.bad:,} bad lines, e.g.:", *summary.bad_examples, sep="\n  ")
    return 0
