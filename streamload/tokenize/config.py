"""What ``streamload tokenize`` is asked to do: one frozen, validated config.

Names follow ``dolma tokens`` 1.2.1 (``documents``, ``destination``, ``tokenizer.name_or_path``,
``tokenizer.bos_token_id``, ``max_size``, ``ring_size``, ``work_dir.input``…); a config file
may use dolma's nested tables (``tokenizer = {name_or_path = …}``, ``work_dir = {input = …}``)
or the flat field names of :class:`TokenizeConfig`.

Every value is checked here, once, with the project's validation helpers
(:mod:`streamload.config.checks`): bad input is a :class:`ConfigError` naming the field,
never a ``TypeError`` later. The output folders (``destination``, ``work_dir_output``) are
normalized here too: a relative path, ``./x``, ``../x`` or a ``file://`` URL becomes the
absolute local path it names, so everything after this point joins file names onto one
spelling of the folder; another protocol (``s3://``) is refused, as outputs are moved into
place with local renames.
"""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamload.config.chat import TrainOn, check_chat_options
from streamload.config.checks import (
    check_bool,
    check_int,
    check_keys,
    check_path,
    close_match,
    to_enum,
)
from streamload.config.data import read_config_file
from streamload.errors import ConfigError

__all__ = [
    "DEFAULT_MAX_SIZE",
    "DEFAULT_RING_SIZE",
    "OutputFormat",
    "TokenizeConfig",
    "check_jsonl_options",
    "flatten_options",
    "load_tokenize_config",
    "local_folder",
]

DEFAULT_MAX_SIZE = 1024**3
"""dolma's default ``max_size``: tokens per output file (each holds strictly fewer)."""

DEFAULT_RING_SIZE = 8
"""dolma's default ``ring_size``: files of a group read at once."""

_NESTED = {
    "tokenizer": {
        "name_or_path": "tokenizer",
        "bos_token_id": "bos_token_id",
        "eos_token_id": "eos_token_id",
        "pad_token_id": "pad_token_id",
        "segment_before_tokenization": "segment_before_tokenization",
    },
    "work_dir": {"input": "work_dir_input", "output": "work_dir_output"},
}
"""dolma's nested config tables → flat field names."""


class OutputFormat(str, enum.Enum):
    """What ``streamload tokenize`` writes (one writer per output file)."""

    DOLMA = "dolma"
    """Headerless ``part-G-MMMMM.npy`` + ``.csv.gz`` rows, as ``dolma tokens``."""
    MEGATRON = "megatron"
    """``part-G-MMMMM.bin`` + ``.idx`` as megatron-core ``IndexedDatasetBuilder``."""
    MODALITIES = "modalities"
    """``part-G-MMMMM.pbin`` as Modalities ``pack_encoded_data``."""
    NUMPY = "numpy"
    """Real NumPy ``part-G-MMMMM.npy`` files (KempnerForge / nanoGPT style)."""
    DATATROVE = "datatrove"
    """``part-G-MMMMM.ds`` + ``.ds.index`` + ``.ds.metadata`` as datatrove."""


@dataclass(frozen=True, kw_only=True)
class TokenizeConfig:
    """A tokenization run.

    Args:
        documents: Input JSONL paths or globs (local or fsspec URLs; ``.gz``/``.zst`` read).
        destination: Output folder.
        tokenizer: Path of a HuggingFace ``tokenizer.json``.
        bos_token_id: Prepended to each document that does not start with it.
        eos_token_id: Appended to each document that does not end with it.
        pad_token_id: Recorded only (dolma accepts it); must fit the dtype.
        segment_before_tokenization: Tokenize paragraph by paragraph (long documents).
        format: Output format.
        dtype: Token dtype, or ``auto`` for the format's smallest that holds the vocabulary.
        max_size: Each output file holds fewer than this many tokens (documents never split).
        processes: Worker processes.
        files_per_process: Input files per group (one group = one set of outputs);
            ``None``: the files are spread over ``processes`` groups.
        ring_size: Files of a group read at once, round robin.
        batch_size: Documents collected from the ring and shuffled together.
        seed: Seed of the input order and of every batch shuffle.
        text_field: JSON key of the text (dots reach into nested objects).
        id_field: JSON key of the document id (the dolma CSV ``id`` column); a line without
            it is a bad line. Empty or ``None``: ids are ``{sha256(path)}-{line}`` (dolma).
        work_dir_input: Accepted for dolma compatibility (inputs are streamed, not copied).
        work_dir_output: Scratch folder for outputs being written (default: in destination).
        shard_index: This machine's share of the groups (``g % num_shards == shard_index``).
        num_shards: Machines sharing the run.
        skip_bad_lines: Skip (and count) malformed lines instead of failing.
        loss_spans_field: JSON key (dots reach into nested objects) of each document's
            trained ``[start, end)`` character spans; a loss mask is written beside every
            output file (:mod:`streamload.tokenize.loss_spans`). ``None``: no masks.
        messages_field: JSON key (dots reach into nested objects) of each document's chat
            ``messages``, rendered with the tokenizer's chat template and written with a
            loss mask (:mod:`streamload.tokenize.chat`); ``text_field`` is then unused.
        chat_template: The template file (``.jinja`` or a ``tokenizer_config.json``);
            ``None``: the tokenizer's own (beside its ``tokenizer.json``).
        train_on: A conversation's trained tokens: ``assistant``, ``last`` or ``all``.
        keep_order: Write the documents in input order instead of dolma's light shuffle:
            each input file is its own group, in the listed order, read from start to end
            (``batch_size`` documents encoded at once, never shuffled); ``seed`` is unused
            and ``processes`` only parallelizes the groups. ``files_per_process`` and
            ``ring_size`` are refused with it (:mod:`streamload.tokenize.shuffle`).
    """

    documents: tuple[str, ...]
    destination: str
    tokenizer: str
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    segment_before_tokenization: bool = False
    format: OutputFormat = OutputFormat.DOLMA
    dtype: str = "auto"
    max_size: int = DEFAULT_MAX_SIZE
    processes: int = 1
    files_per_process: int | None = None
    ring_size: int = DEFAULT_RING_SIZE
    batch_size: int = 10_000
    seed: int = 3920
    text_field: str = "text"
    id_field: str | None = "id"
    work_dir_input: str | None = None
    work_dir_output: str | None = None
    shard_index: int = 0
    num_shards: int = 1
    skip_bad_lines: bool = False
    loss_spans_field: str | None = None
    keep_order: bool = False
    messages_field: str | None = None
    chat_template: str | None = None
    train_on: TrainOn = TrainOn.ASSISTANT

    def __post_init__(self) -> None:
        docs = (self.documents,) if isinstance(self.documents, str) else self.documents
        if not isinstance(docs, (list, tuple)) or not docs:
            raise ConfigError(f"documents = {self.documents!r} must name at least one path")
        for doc in docs:
            check_path(doc, "documents")
        object.__setattr__(self, "documents", tuple(docs))
        if self.id_field == "":
            object.__setattr__(self, "id_field", None)
        if self.id_field is not None and not isinstance(self.id_field, str):
            raise ConfigError(f"id_field = {self.id_field!r} must be a string or empty")
        for name in ("tokenizer", "text_field"):
            check_path(getattr(self, name), name)
        object.__setattr__(self, "destination", local_folder(self.destination, "destination"))
        if self.work_dir_output is not None:
            folder = local_folder(self.work_dir_output, "work_dir_output")
            object.__setattr__(self, "work_dir_output", folder)
        if self.work_dir_input is not None:
            check_path(self.work_dir_input, "work_dir_input")
        for name in ("segment_before_tokenization", "skip_bad_lines", "keep_order"):
            check_bool(getattr(self, name), name)
        self._check_loss_spans()
        self._check_chat()
        object.__setattr__(self, "format", to_enum(OutputFormat, self.format, "format"))
        self._check_numbers()
        self._check_keep_order(ring_size_given=self.ring_size != DEFAULT_RING_SIZE)
        if not isinstance(self.dtype, str) or not self.dtype:
            raise ConfigError(f"dtype = {self.dtype!r} must be 'auto' or a numpy integer dtype")

    def _check_loss_spans(self) -> None:
        if self.loss_spans_field is None:
            return
        check_path(self.loss_spans_field, "loss_spans_field")
        if self.segment_before_tokenization:
            raise ConfigError(
                f"loss_spans_field = {self.loss_spans_field!r} cannot be combined with "
                "segment_before_tokenization (span offsets are mapped through one encoding "
                "of the whole text); drop one of them"
            )

    def _check_chat(self) -> None:
        train_on = check_chat_options(self.messages_field, self.chat_template, self.train_on, "")
        object.__setattr__(self, "train_on", train_on)
        if self.messages_field is None:
            return
        for other in ("loss_spans_field", "segment_before_tokenization"):
            if getattr(self, other):  # masks come from the template; one encoding per text
                raise ConfigError(
                    f"messages_field = {self.messages_field!r} cannot be combined with {other} "
                    "(a conversation's loss mask comes from its chat template); drop one"
                )

    def _check_keep_order(self, *, ring_size_given: bool) -> None:
        """Refuse the grouping options that ``keep_order`` replaces (one group per file)."""
        if not self.keep_order:
            return
        given = []
        if self.files_per_process is not None:
            given.append(f"files_per_process = {self.files_per_process}")
        if ring_size_given:
            given.append(f"ring_size = {self.ring_size}")
        if given:
            raise ConfigError(
                f"keep_order cannot be combined with {' and '.join(given)}: keep_order makes "
                "each input file its own group, read in order (no ring); drop "
                f"{'them' if len(given) > 1 else 'it'} or drop keep_order"
            )

    def _check_numbers(self) -> None:
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            value = getattr(self, name)
            if value is not None:
                check_int(value, name, 0)
        if self.bos_token_id is None and self.eos_token_id is None and not self.messages_field:
            raise ConfigError(
                "bos_token_id and eos_token_id are both unset; give at least one "
                "(--eos-token-id / --tokenizer.eos_token_id), as dolma requires"
            )
        for name, minimum in (("max_size", 2), ("processes", 1), ("ring_size", 1)):
            check_int(getattr(self, name), name, minimum)
        for name, minimum in (("batch_size", 1), ("seed", 0), ("shard_index", 0)):
            check_int(getattr(self, name), name, minimum)
        check_int(self.num_shards, "num_shards", 1)
        if self.files_per_process is not None:
            check_int(self.files_per_process, "files_per_process", 1)
        if self.shard_index >= self.num_shards:
            raise ConfigError(
                f"shard_index = {self.shard_index} must be < num_shards = {self.num_shards}"
            )

    def output_key(self) -> dict[str, Any]:
        """The fields that decide the output bytes (what a restart must repeat).

        Scratch folders and the machine's shard do not change any output file, nor does
        ``processes`` once ``files_per_process`` fixes the groups (without it, dolma makes
        one group per process), nor the destination (the folder holding the record: it may
        be reached by another path or moved); everything else must match the interrupted run.
        With ``keep_order`` the shuffle's options (``seed``, ``batch_size``, ``ring_size``,
        ``processes``, ``files_per_process``) do not change the output either.
        """
        skip = {"destination", "work_dir_input", "work_dir_output", "shard_index"}
        if self.files_per_process is not None:
            skip.add("processes")
        if self.loss_spans_field is None:  # the record of a run without masks is unchanged
            skip.add("loss_spans_field")
        if self.messages_field is None:  # nor that of a run without conversations
            skip |= {"messages_field", "chat_template", "train_on"}
        if not self.keep_order:  # the record of a shuffled run is unchanged
            skip.add("keep_order")
        else:  # one group per file, read in order: none of these moves a document
            skip |= {"processes", "files_per_process", "ring_size", "batch_size", "seed"}
        return {k: v for k, v in self.to_dict().items() if k not in skip}

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-safe values, flat field names."""
        out = dataclasses.asdict(self)
        out["format"] = self.format.value
        out["train_on"] = self.train_on.value
        out["documents"] = list(self.documents)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TokenizeConfig:
        """Build from flat names or dolma's nested ``tokenizer``/``work_dir`` tables.

        Raises:
            ConfigError: not a table, an unknown key, a missing required key, or an invalid
                value.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"tokenize config must be a table of options, got {data!r}")
        flat = flatten_options(data)
        check_keys(flat, cls, "tokenize config")
        for key in ("documents", "destination", "tokenizer"):
            if flat.get(key) is None:
                raise ConfigError(f"tokenize config: {key} is required")
        config = cls(**flat)
        # a ring_size given explicitly is refused even at its default value (the constructor
        # alone cannot tell it from the default)
        config._check_keep_order(ring_size_given="ring_size" in flat)
        return config


def flatten_options(data: Mapping[str, Any]) -> dict[str, Any]:
    """Flat field names from dolma's nested tables and kebab-case keys (``dryrun`` dropped).

    Raises:
        ConfigError: a key that is not a string, or an unknown key inside a nested table.
    """
    flat: dict[str, Any] = {}
    unknown: list[str] = []  # every nested table's unknown keys, reported together
    for key, value in data.items():
        if not isinstance(key, str):
            raise ConfigError(f"tokenize config: key {key!r} must be a string")
        key = key.replace("-", "_")
        if key in _NESTED and isinstance(value, Mapping):
            for sub, sub_value in value.items():
                if isinstance(sub, str) and sub in _NESTED[key]:
                    flat[_NESTED[key][sub]] = sub_value
                else:
                    unknown.append(_unknown_nested(key, sub))
        elif key != "dryrun":  # a CLI action, not part of the run
            flat[key] = value
    if unknown:
        raise ConfigError("; ".join(unknown))
    return flat


def _unknown_nested(table: str, key: Any) -> str:
    """``work_dir.inptu: unknown key (did you mean input?); allowed: input, output``."""
    allowed = sorted(_NESTED[table])
    close = close_match(key, allowed) if isinstance(key, str) else None
    hint = f" (did you mean {close}?)" if close else ""
    return f"{table}.{key!s}: unknown key{hint}; allowed: {', '.join(allowed)}"


def load_tokenize_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The raw mapping of a JSON, YAML or TOML config file (``-c config.json``).

    Raises:
        ConfigError: missing, unreadable, not UTF-8, unparsable or not a table.
    """
    file = Path(path)
    try:
        data = read_config_file(file)
    except (OSError, UnicodeDecodeError) as exc:  # raised before the parser's own checks
        raise ConfigError(f"{file}: cannot read the config file: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: the config must be a table of options, got {data!r}")
    return data


def local_folder(value: Any, field_name: str) -> str:
    """The absolute local path an output folder option names.

    Args:
        value: A path (relative, ``./``, ``../``, absolute) or a ``file://`` URL.
        field_name: The option, for messages.

    Raises:
        ConfigError: not a path, or a URL of another protocol.
    """
    import fsspec  # ~90 ms (asyncio, ssl): not for the CLI's parser, which imports this module

    check_path(value, field_name)
    protocol, path = fsspec.core.split_protocol(value)
    if protocol not in (None, "file", "local"):
        raise ConfigError(
            f"{field_name} = {value!r}: tokenize writes into a local folder (outputs are "
            "renamed into place); give a local path or a file:// URL, and copy the folder to "
            f"{protocol}:// afterwards"
        )
    return os.path.abspath(path)


def check_jsonl_options(data: Mapping[str, Any]) -> None:
    """Check the options ``--format jsonl`` uses (documents, tokenizer, BOS/EOS, text field).

    Raises:
        ConfigError: a missing or invalid one.
    """
    docs = data.get("documents")
    docs = [docs] if isinstance(docs, str) else docs
    if not isinstance(docs, (list, tuple)) or not docs:
        raise ConfigError(f"--format jsonl needs --documents, got {data.get('documents')!r}")
    for doc in docs:
        check_path(doc, "documents")
    if data.get("tokenizer") is None:
        raise ConfigError("--format jsonl needs --tokenizer")
    check_path(data["tokenizer"], "tokenizer")
    for name in ("bos_token_id", "eos_token_id"):
        if data.get(name) is not None:
            check_int(data[name], name, 0)
    if data.get("text_field") is not None:
        check_path(data["text_field"], "text_field")
    for name in ("loss_spans_field", "messages_field"):
        if data.get(name) is not None:
            raise ConfigError(
                "--format jsonl tokenizes while training and keeps no loss mask; "
                f"--{name.replace('_', '-')} needs a token format (--format dolma, numpy...)"
            )
