"""One ``[[sources]]`` entry: where a dataset's shards are and how to read them."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from streamload.config.chat import TrainOn, check_chat_options
from streamload.config.checks import check_int, check_number, check_path, show, to_enum
from streamload.errors import ConfigError

__all__ = [
    "TEXT_FORMATS",
    "TOKEN_DTYPES",
    "OnError",
    "ShardFormat",
    "SourceConfig",
    "SourcePolicy",
]

TOKEN_DTYPES = ("uint8", "uint16", "uint32", "uint64", "int16", "int32", "int64")
"""Token dtypes a shard may hold (unsigned or signed integers; never floats)."""


class ShardFormat(str, enum.Enum):
    """On-disk format of a source's shards."""

    AUTO = "auto"
    """Decide per file from magic bytes and companions."""
    NUMPY = "numpy"
    """Real NumPy ``.npy`` files (``\\x93NUMPY`` magic), e.g. KempnerForge shards; dtype from the
    header. ``"npy"``, its former name, is accepted and means the same (``ShardFormat.NPY`` is
    this member)."""
    NPY = "numpy"
    RAW = "raw"
    """Headerless flat tokens (tatm/KempnerForge ``.bin``, Dolma-style ``.npy``); needs a dtype."""
    MEGATRON = "megatron"
    """Megatron-LM / Megatron-Core ``.bin`` + ``.idx`` (MMIDIDX)."""
    MODALITIES = "modalities"
    """Modalities packed ``.pbin``."""
    DOLMA = "dolma"
    """Dolma ``part-*.npy`` (headerless) + ``.csv.gz`` document metadata."""
    DATATROVE = "datatrove"
    """datatrove / nanotron ``.ds`` + ``.ds.index`` + ``.ds.metadata``."""
    JSONL = "jsonl"
    """Raw ``.jsonl`` tokenized on the fly, prepared with ``streamload tokenize --format jsonl``
    (a ``.idx`` and a ``.tok.json`` record beside it; docs/tokenize.md)."""
    ARROW = "arrow"
    """Hugging Face ``datasets.save_to_disk`` folders (Arrow IPC files): a list-of-integers
    column (``column``, default ``input_ids``), one row per document."""
    PARQUET = "parquet"
    """Parquet files with a list-of-integers column (``column``, default ``input_ids``), one
    row per document (Hugging Face Hub datasets, ``to_parquet``)."""
    MDS = "mds"
    """Mosaic Streaming ``index.json`` + ``shard.NNNNN.mds``: a token column (``column``) per
    sample, one sample per document."""
    LITDATA = "litdata"
    """LitData ``index.json`` + ``chunk-*.bin`` written by ``optimize`` with ``TokensLoader``:
    one token stream, like a NumPy folder."""
    TEXT = "text"
    """Text documents (JSONL(.gz/.zst), Parquet, Arrow, MDS text columns) tokenized once, on
    first use, into a cache of token files (``tokenizer`` required; docs/text.md). A source
    with a ``tokenizer`` and ``format = "auto"``, ``"parquet"``, ``"arrow"`` or ``"mds"`` is a
    text source too (the last three fix the kind of every input file)."""

    @classmethod
    def _missing_(cls, value: object) -> ShardFormat | None:
        # former names still accepted (streamload.formats.base.FORMAT_ALIASES)
        return cls.NUMPY if value == "npy" else None


_COLUMN_FORMATS = (
    ShardFormat.AUTO, ShardFormat.ARROW, ShardFormat.PARQUET, ShardFormat.MDS, ShardFormat.JSONL,
)  # fmt: skip
"""Formats whose files hold named columns (``[[sources]] column``; JSONL: rows of token
ids, a field per column)."""
_TABLE_FORMATS = (ShardFormat.AUTO, ShardFormat.ARROW, ShardFormat.PARQUET, ShardFormat.JSONL)
TEXT_FORMATS = (
    ShardFormat.AUTO, ShardFormat.TEXT, ShardFormat.PARQUET, ShardFormat.ARROW, ShardFormat.MDS,
)  # fmt: skip
"""Formats a source with a ``tokenizer`` reads as text, tokenized into the cache (``jsonl``
with a tokenizer is the older on-the-fly raw JSONL format)."""
"""Formats whose rows may carry a loss-mask and an id column (``mask_column``, ``id_column``)."""


class SourcePolicy(str, enum.Enum):
    """What a mixture does when a source has given all its windows."""

    REPEAT = "repeat"
    """Start the source's next epoch, reshuffled with (seed, source, epoch)."""
    STOP = "stop"
    """End the whole stream before the batch that would need a second epoch."""


class OnError(str, enum.Enum):
    """What happens when a remote object stays unreadable after every retry (docs/remote.md)."""

    RAISE = "raise"
    """Fail with an error naming the object (the default)."""
    SKIP = "skip"
    """Deterministic skip: an unreadable shard is left out at start-up, and a sample whose
    bytes cannot be read later is delivered with every label ``-100``; both are counted in
    ``loader.stats()`` and warned about, never silent."""


@dataclass(frozen=True, kw_only=True)
class SourceConfig:
    """One dataset: a folder, glob or list of token shards.

    Args:
        name: Unique name, used in state, stats and seeds.
        path: A folder, a glob, a file, or a list of those (local paths or fsspec URLs).
        format: Shard format; ``auto`` sniffs each file.
        dtype: Token dtype, or ``auto`` where the format stores it.
        weight: Mixture weight (required when mixing several sources).
        policy: ``repeat`` (default) or ``stop`` when the source runs out in a mixture.
        max_epochs: End the stream before this source would start epoch ``max_epochs``.
        storage_options: Passed to fsspec for remote paths.
        on_error: ``raise`` or ``skip`` when a remote object stays unreadable.
        tokenizer: A local ``tokenizer.json`` (Hugging Face ``tokenizers``). With it the
            source is a **text source** (docs/text.md): its files (JSONL(.gz/.zst), Parquet,
            Arrow, MDS) are tokenized once, on first use, into ``cache_dir``, and read from
            there; with ``format = "jsonl"``, the older raw JSONL format tokenized on the fly
            (each file indexed at start-up when its record is missing or was made with other
            settings).
        bos_token_id: With ``tokenizer``: BOS added when absent.
        eos_token_id: With ``tokenizer``: EOS added when absent (at least one of the two).
        text_field: With ``tokenizer``: the field holding the text: a JSON key (dotted:
            nested) or a column of Parquet, Arrow or MDS files (dotted: into a struct).
        messages_field: A text source's chat ``messages`` field (dotted: nested), rendered
            with the tokenizer's chat template and cached with a loss mask (docs/text.md,
            "Chat"); ``text_field`` is then unused and BOS/EOS are optional.
        chat_template: With ``messages_field``: the template file (``.jinja`` or a
            ``tokenizer_config.json``); ``None``: the tokenizer's own.
        train_on: With ``messages_field``: ``assistant`` (default), ``last`` or ``all``.
        cache_dir: A text source's token cache: a folder or an fsspec URL (``s3://…``) that
            every rank can reach (``None``: ``text/`` in ``[storage] cache_dir``).
        label_masks: Per-token loss masks (docs/formats.md, "Loss masks"): ``"auto"``
            (default) uses those found beside the token files (datatrove ``X.ds.loss``,
            OLMo-core ``labels_mask*`` beside ``token_ids*``); ``"none"`` ignores them; a
            folder, glob, file or list of those names the mask files, paired in listing
            order with the source's shards.
        column: The token column of an ``arrow``, ``parquet`` or ``mds`` source, or the
            token field of ``jsonl`` rows of token ids (``None``: the format's default,
            ``input_ids`` for Arrow/Parquet/JSONL).
        mask_column: An ``arrow``, ``parquet`` or ``jsonl`` (rows) source's loss-mask
            column (a list of 0/1 integers or booleans per row, as long as the row's
            tokens; ``"labels"``: the Hugging Face ``labels``, read as ``labels != -100``),
            required in every file; ``None``: the first of ``loss_mask``, ``labels_mask``,
            ``labels``, ``assistant_masks``, ``completion_mask`` a file has is used (with
            ``label_masks = "auto"``; docs/formats.md).
        id_column: An ``arrow``, ``parquet`` or ``jsonl`` (rows) source's document id
            column, shown by ``streamload docs`` and ``show`` (``None``: ``id`` where a
            file has it).
    """

    name: str
    path: str | tuple[str, ...]
    format: ShardFormat = ShardFormat.AUTO
    dtype: str = "auto"
    weight: float | None = None
    policy: SourcePolicy = SourcePolicy.REPEAT
    max_epochs: int | None = None
    storage_options: dict[str, Any] = field(default_factory=dict)
    on_error: OnError = OnError.RAISE
    tokenizer: str | None = None
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    text_field: str = "text"
    label_masks: str | tuple[str, ...] = "auto"
    column: str | None = None
    mask_column: str | None = None
    id_column: str | None = None
    cache_dir: str | None = None
    messages_field: str | None = None
    chat_template: str | None = None
    train_on: TrainOn | None = None

    def __post_init__(self) -> None:
        where = f"source {show(self.name)}"
        object.__setattr__(self, "policy", to_enum(SourcePolicy, self.policy, f"{where}: policy"))
        object.__setattr__(self, "on_error", to_enum(OnError, self.on_error, f"{where}: on_error"))
        if self.max_epochs is not None:
            check_int(self.max_epochs, f"{where}: max_epochs", 1)
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"source name {show(self.name)} must be a non-empty string")
        if not isinstance(self.path, (str, list, tuple)):
            raise ConfigError(f"{where}: path {show(self.path)} must be a non-empty string or list")
        paths = (self.path,) if isinstance(self.path, str) else tuple(self.path)
        if not paths or not all(isinstance(p, str) and p for p in paths):
            raise ConfigError(f"{where}: path {show(self.path)} must be a non-empty string or list")
        for entry in paths:
            check_path(entry, f"{where}: path")
        if isinstance(self.path, list):
            object.__setattr__(self, "path", paths)
        if not isinstance(self.storage_options, dict) or not all(
            isinstance(k, str) for k in self.storage_options
        ):
            raise ConfigError(
                f"{where}: storage_options = {show(self.storage_options)} must be a table of "
                "options"
            )
        object.__setattr__(self, "format", to_enum(ShardFormat, self.format, f"{where}: format"))
        self._check_tokenizing(where)
        if self.dtype != "auto" and self.dtype not in TOKEN_DTYPES:
            raise ConfigError(
                f"{where}: dtype = {show(self.dtype)} is not 'auto' or one of "
                f"{', '.join(TOKEN_DTYPES)}"
            )
        if self.weight is not None:
            check_number(self.weight, f"{where}: weight", 0)
        self._check_label_masks(where)
        self._check_column(where, "column", _COLUMN_FORMATS)
        self._check_column(where, "mask_column", _TABLE_FORMATS)
        self._check_column(where, "id_column", _TABLE_FORMATS)
        self._check_mask_column(where)

    def _check_label_masks(self, where: str) -> None:
        masks = self.label_masks
        entries = (masks,) if isinstance(masks, str) else masks
        if not isinstance(masks, (str, list, tuple)) or not entries:
            raise ConfigError(
                f"{where}: label_masks = {show(masks)} must be 'auto', 'none', or the mask "
                "files as a path, glob or list"
            )
        for entry in entries:
            check_path(entry, f"{where}: label_masks")
        if not isinstance(masks, str) and {"auto", "none"} & set(entries):
            raise ConfigError(
                f"{where}: label_masks = {show(masks)}: 'auto' and 'none' stand alone, "
                "not in a list of paths"
            )
        if isinstance(masks, list):
            object.__setattr__(self, "label_masks", tuple(masks))

    def _check_column(self, where: str, name: str, formats: tuple[ShardFormat, ...]) -> None:
        """A column name field (``column``, ``mask_column``, ``id_column``): a non-empty
        string, set only for the ``formats`` whose files hold such columns."""
        value = getattr(self, name)
        if value is None:
            return
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{where}: {name} = {show(value)} must be a column name")
        if self.format not in formats:
            names = ", ".join(repr(f.value) for f in formats)
            raise ConfigError(
                f"{where}: {name} = {show(value)} only applies to format = {names} "
                f"(this source's format is {self.format.value!r})"
            )

    def _check_mask_column(self, where: str) -> None:
        """``mask_column`` reads masks from the token files: not the token column itself,
        and not beside ``label_masks = "none"`` or named mask files."""
        if self.mask_column is None:
            return
        if self.mask_column == (self.column or "input_ids"):
            raise ConfigError(
                f"{where}: mask_column = {show(self.mask_column)} is the token column; name "
                "the column of 0/1 loss-mask flags"
            )
        if self.label_masks != "auto":
            raise ConfigError(
                f"{where}: mask_column = {show(self.mask_column)} and label_masks = "
                f"{show(self.label_masks)} disagree; a source's masks come from its mask "
                "column or from mask files (remove one of the two)"
            )

    def _check_tokenizing(self, where: str) -> None:
        for name in ("bos_token_id", "eos_token_id"):
            if getattr(self, name) is not None:
                check_int(getattr(self, name), f"{where}: {name}", 0)
        if not isinstance(self.text_field, str) or not self.text_field:
            raise ConfigError(f"{where}: text_field = {show(self.text_field)} must be a field name")
        given = [n for n in ("bos_token_id", "eos_token_id") if getattr(self, n) is not None]
        if self.text_field != "text":
            given.append("text_field")
        if self.cache_dir is not None:
            given.append("cache_dir")
        given += [n for n in ("messages_field", "chat_template", "train_on") if getattr(self, n)]
        if self.tokenizer is None:
            if given:
                raise ConfigError(
                    f"{where}: {', '.join(given)} only apply with a tokenizer "
                    '(a text source: tokenizer = "tokenizer.json"; docs/text.md)'
                )
            if self.format is ShardFormat.TEXT:
                raise ConfigError(
                    f'{where}: format = "text" needs a tokenizer (tokenizer = "tokenizer.json" '
                    "and bos_token_id or eos_token_id; docs/text.md)"
                )
            return
        check_path(self.tokenizer, f"{where}: tokenizer")
        if self.format is not ShardFormat.JSONL and self.format not in TEXT_FORMATS:
            names = ", ".join(repr(f.value) for f in (ShardFormat.JSONL, *TEXT_FORMATS))
            raise ConfigError(
                f"{where}: tokenizer is set but format = {self.format.value!r}; a source "
                f"with a tokenizer reads text (format = {names})"
            )
        if self.messages_field is not None and not self.is_text:
            raise ConfigError(
                f'{where}: messages_field needs a text source (format = "text", "auto", '
                f'"parquet", "arrow" or "mds"), not format = {self.format.value!r}'
            )
        trained = check_chat_options(
            self.messages_field, self.chat_template, self.train_on, f"{where}: "
        )
        if self.messages_field is not None:
            object.__setattr__(self, "train_on", trained)
            self._check_text(where)  # the template writes BOS/EOS: neither is required
            return
        if self.bos_token_id is None and self.eos_token_id is None:
            kind = "jsonl source" if self.format is ShardFormat.JSONL else "text source"
            raise ConfigError(
                f"{where}: a {kind} with a tokenizer needs bos_token_id or eos_token_id"
            )
        if self.is_text:
            self._check_text(where)
        elif self.column or self.mask_column or self.id_column:  # format = "jsonl"
            raise ConfigError(
                f"{where}: column, mask_column and id_column apply to JSONL rows of token ids, "
                "read without a tokenizer; with a tokenizer the lines are text (text_field)"
            )

    def _check_text(self, where: str) -> None:
        """What a text source takes: no token column, mask files or mask column (its tokens
        and documents come from the cache it writes)."""
        for name in ("column", "mask_column", "id_column"):
            if getattr(self, name) is not None:
                raise ConfigError(
                    f"{where}: {name} does not apply to a text source (its text is read from "
                    f"text_field = {self.text_field!r})"
                )
        if self.label_masks != "auto":
            raise ConfigError(
                f"{where}: label_masks = {show(self.label_masks)} does not apply to a text "
                "source (its token files and masks, with messages_field, are written by streamload)"
            )
        if self.cache_dir is not None:
            check_path(self.cache_dir, f"{where}: cache_dir")

    @property
    def is_text(self) -> bool:
        """Whether this is a text source (tokenized into the cache on first use)."""
        return self.tokenizer is not None and self.format in TEXT_FORMATS

    @property
    def paths(self) -> tuple[str, ...]:
        """The path entries as a tuple."""
        return (self.path,) if isinstance(self.path, str) else self.path

    @property
    def mask_paths(self) -> tuple[str, ...]:
        """The mask files named by ``label_masks`` (empty for ``"auto"`` and ``"none"``)."""
        if self.label_masks in ("auto", "none"):
            return ()
        masks = self.label_masks
        return (masks,) if isinstance(masks, str) else masks
