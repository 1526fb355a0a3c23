"""The token cache of a text source: each input file tokenized once, published whole.

A text source (``[[sources]] tokenizer = …``, docs/text.md) reads its text files through this
cache. Layout under the source's ``cache_dir`` (a local folder or an fsspec URL)::

    <cache_dir>/<settings key>/settings.json          what the key stands for (for people)
    <cache_dir>/<settings key>/<file key>-00000.bin    Megatron tokens of one input file
    <cache_dir>/<settings key>/<file key>-00000.idx    its document index
    <cache_dir>/<settings key>/<file key>.json         the file's marker, written last
    <cache_dir>/<settings key>/manifests/<digest>.json a finished input list, in order

* The **settings key** hashes what decides the bytes besides the input: the cache schema,
  the tokenizer file's sha256, BOS/EOS, the text field, the input kind, the dtype and the
  bad-row rule; for a chat source also the messages field, ``train_on`` and the sha256 of the
  chat template's text (with its special tokens). Another tokenizer, template or option is
  another folder: entries never mix.
* The **file key** hashes the input file's URL, size and version (a local file's
  modification time, an object's ETag or generation): a changed file gets a new key and is
  tokenized again; the old outputs are left alone.
* A file's outputs are written by :class:`~streamload.tokenize.outputs.PartWriter` (the
  writer of ``streamload tokenize``, so the bytes are those of ``streamload tokenize
  --keep-order --format megatron`` on that file) into a hidden staging folder, moved into
  place (each part's index before its tokens), and the **marker** is written last: a file
  is done exactly when its marker is there and names files of the sizes found. A killed
  build leaves no marker, so the next one redoes the file from its start; nothing partial is
  ever read.
* A file whose text is bad (a row that is not JSON, a missing text field) leaves an
  **error marker** (``<file key>.error.json``) naming file, row and field, so that processes
  waiting on it fail with the same message instead of waiting forever.
* A **manifest** records a complete, ordered input list (keyed by the digest of every
  input's file key), so a later start reads one small file instead of one marker per input.

Remote caches (``s3://…``) are written the same way: the parts are made in a local staging
folder, uploaded (tokens last), then the marker.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import posixpath
import shutil
import socket
import tempfile
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import numpy as np

from streamload.config.chat import TrainOn
from streamload.errors import ConfigError, FormatError, RemoteReadError, StreamloadError
from streamload.formats.encoder import DocumentEncoder
from streamload.tokenize.chat import (
    ChatRenderer,
    ChatTemplate,
    check_train_on,
    load_chat_template,
)
from streamload.tokenize.config import OutputFormat
from streamload.tokenize.outputs import choose_dtype
from streamload.tokenize.text_file import (
    ProgressFn,
    TextInput,
    TextSettings,
    build_stamp,
    encoder_of,
    write_parts,
)
from streamload.util.files import file_sha256, write_atomic

__all__ = ["SCHEMA", "TextCache", "TextInput", "TextSettings"]

_NOT_KEYED = {"tokenizer", "messages_field", "chat_template", "train_on"}
"""Settings not in the key as they are: the tokenizer is keyed by its sha256; the chat options
only for a chat source (by the template's sha256, not its path), so other keys stay as they
were."""
_RENDERERS: dict[tuple[str, str, str], ChatRenderer] = {}

SCHEMA = "streamload-text-1"
"""The cache's layout and marker version: part of the settings key, so a streamload that
writes another layout uses other folders."""


class TextCache:
    """One settings folder of a text cache (module docstring).

    Args:
        root: The cache folder or URL (``cache_dir``).
        settings: The source's tokenizing.
        storage_options: fsspec options of a remote root.
        input_options: fsspec options the input files are read with (default
            ``storage_options``): the inputs may be on another storage than the cache.

    Raises:
        ConfigError: the tokenizer cannot be read, or the dtype cannot hold its ids; a chat
            source's template is missing or lacks what ``train_on`` needs.
    """

    def __init__(
        self,
        root: str,
        settings: TextSettings,
        storage_options: Mapping[str, Any] | None = None,
        *,
        input_options: Mapping[str, Any] | None = None,
    ) -> None:
        import fsspec

        self.settings = settings
        self.storage_options = dict(storage_options or {})
        self.input_options = dict(self.storage_options if input_options is None else input_options)
        if not os.path.isfile(settings.tokenizer):
            raise ConfigError(
                f"tokenizer {settings.tokenizer!r}: no such file; give the path of a "
                "tokenizer.json (Hugging Face tokenizers)"
            )
        self.tokenizer_sha256 = file_sha256(settings.tokenizer)
        # the configured dtype (``auto`` or a name) decides the written one with the
        # tokenizer's sha256: the key needs no tokenizer loaded, so a warm start loads none
        described = {
            "schema": SCHEMA,
            "tokenizer_sha256": self.tokenizer_sha256,
            **{k: v for k, v in asdict(settings).items() if k not in _NOT_KEYED},
        }
        self.chat_template: ChatTemplate | None = None
        if settings.messages_field is not None:  # a text source's key is unchanged
            self.chat_template = load_chat_template(settings.tokenizer, settings.chat_template)
            check_train_on(self.chat_template, settings.train_on)
            described.update(
                messages_field=settings.messages_field,
                train_on=settings.train_on,
                chat_template_sha256=self.chat_template.sha256,
            )
        self.described = described
        self.key = _digest(json.dumps(described, sort_keys=True))[:16]
        self.fs, stripped = fsspec.core.url_to_fs(root, **self.storage_options)
        self.local = "file" in _protocols(self.fs) or "local" in _protocols(self.fs)
        self.folder = f"{stripped.rstrip('/')}/{self.key}"
        self.url = self.folder if self.local else str(self.fs.unstrip_protocol(self.folder))

    @functools.cached_property
    def dtype(self) -> np.dtype:
        """The token dtype written (loads the tokenizer: the first build asks, before any
        work).

        Raises:
            ConfigError: ``dtype`` cannot hold the tokenizer's ids or a BOS/EOS id.
        """
        s = self.settings
        special = {"bos_token_id": s.bos_token_id, "eos_token_id": s.eos_token_id}
        vocab_size = self.encoder().vocab_size
        return choose_dtype(OutputFormat.MEGATRON, s.dtype, vocab_size, special)

    def encoder(self) -> DocumentEncoder:
        """The tokenizer with BOS/EOS (one per process: :func:`encoder_of`)."""
        s = self.settings
        return encoder_of(s.tokenizer, s.bos_token_id, s.eos_token_id, self.tokenizer_sha256)

    def renderer(self) -> ChatRenderer | None:
        """A chat source's renderer (one per process and template), else ``None``."""
        template, s = self.chat_template, self.settings
        if template is None or s.messages_field is None:
            return None
        key = (template.sha256, s.messages_field, s.train_on)
        if key not in _RENDERERS:
            _RENDERERS[key] = ChatRenderer(template, s.messages_field, TrainOn(s.train_on))
        return _RENDERERS[key]

    def file_key(self, item: TextInput) -> str:
        """The key of an input file's outputs: its URL, size and version hashed."""
        return _digest(f"{item.url}\0{item.size}\0{item.version}")[:24]

    def path(self, name: str) -> str:
        """A name in this settings folder, as its file system spells it."""
        return f"{self.folder}/{name}"

    def marker(self, item: TextInput) -> dict[str, Any] | None:
        """The done marker of ``item``, or ``None`` when it is not (completely) there.

        Raises:
            FormatError: a marker that is not one this streamload wrote for this input.
        """
        path = self.path(self.file_key(item) + ".json")
        try:
            data = self.fs.cat_file(path)
        except FileNotFoundError:
            return None
        marker = check_marker(data, item, path)
        if self.local and not all(
            _size(self.path(name)) == size for name, size in marker["files"].items()
        ):
            return None  # a part removed or cut since: the file is tokenized again
        return marker

    def names(self) -> frozenset[str]:
        """The names in this settings folder, listed afresh: a waiting rank's one look a
        round (looks per file were ~4x10^7 requests a round for 10^4 files awaited by
        1,000 ranks: benchmarks/text_poll.py)."""
        self.fs.invalidate_cache(self.folder)
        try:
            listed = self.fs.ls(self.folder, detail=False)
        except FileNotFoundError:
            listed = []
        finally:  # s3fs answers "no such file" from a kept listing: later looks must ask
            self.fs.invalidate_cache(self.folder)
        return frozenset(posixpath.basename(p) for p in listed)

    def failure(self, item: TextInput) -> dict[str, str] | None:
        """The error marker a failed build of ``item`` left (``error``: the message,
        ``built``: which build, so that a waiter tells a failure it waited on from an
        earlier run's), or ``None``."""
        try:
            data = self.fs.cat_file(self.path(self.file_key(item) + ".error.json"))
        except FileNotFoundError:
            return None
        try:
            found = json.loads(data)
            return {"error": str(found["error"]), "built": str(found.get("built", ""))}
        except (ValueError, KeyError, TypeError):
            message = f"{item.url}: tokenizing it failed in another process (unreadable record)"
            return {"error": message, "built": hashlib.sha256(data).hexdigest()}

    def build(self, item: TextInput, progress: ProgressFn | None = None) -> dict[str, Any]:
        """Tokenize ``item`` into the cache and return its marker.

        Raises:
            FormatError: a bad row (without ``skip_bad``) or an unreadable input.
            RemoteReadError: a storage client's own error (a refused connection, say) while
                the input was read or the parts uploaded.

        Any failure but an interrupt leaves an error marker naming it, so that the
        processes waiting on this file fail with its message instead of waiting forever.
        """
        key = self.file_key(item)
        writer = f"{socket.gethostname()}-{os.getpid()}"  # text_build.discard_staging reads it
        staging = tempfile.mkdtemp(prefix=f".{key}.{writer}-", dir=self._staging_root())
        try:
            try:
                marker = self._write(item, key, staging, progress)
                self._publish(staging, marker)
            except Exception as exc:
                error = exc  # a storage client's own error is named (a bug keeps its traceback)
                if not isinstance(exc, StreamloadError) and ("://" in item.url or not self.local):
                    what = f"{type(exc).__name__}: {exc}"
                    error = RemoteReadError(
                        f"{item.url}: tokenizing it into {self.url} failed: {what}"
                    )
                self._record_error(key, str(error))
                if error is exc:
                    raise
                raise error from exc
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return marker

    def _record_error(self, key: str, message: str) -> None:
        """The error marker of a failed build (best effort: the store may be what failed,
        and the build's own error is the one to raise)."""
        failure = {"error": message, "built": build_stamp()}
        with contextlib.suppress(Exception):
            self._put_bytes(key + ".error.json", json.dumps(failure).encode())

    def _staging_root(self) -> str | None:
        """Local staging beside the outputs (one rename publishes); a temp folder when the
        cache is remote."""
        if not self.local:
            self._describe_folder()
            return None
        root = self.path(".staging")
        os.makedirs(root, exist_ok=True)
        self._describe_folder()
        return root

    def _describe_folder(self) -> None:
        path = self.path("settings.json")
        record = {**self.described, "tokenizer": self.settings.tokenizer, "dtype": self.dtype.name}
        text = json.dumps(record, indent=1)
        if not self.local:
            if not self.fs.exists(path):
                self.fs.pipe_file(path, text.encode())
        elif not os.path.exists(path):
            write_atomic(path, text)

    def _write(
        self, item: TextInput, key: str, staging: str, progress: ProgressFn | None
    ) -> dict[str, Any]:
        """Tokenize ``item`` into ``staging``; its marker (:func:`write_parts`)."""
        found = write_parts(
            item, key, staging, self.settings, self.dtype, self.encoder(), self.input_options,
            progress, self.renderer(),
        )  # fmt: skip
        return {"schema": SCHEMA, **found}

    def _publish(self, staging: str, marker: dict[str, Any]) -> None:
        """Move the parts into place (each index before its tokens), then the marker."""
        names = sorted(marker["files"], key=lambda n: (n.endswith(".bin"), n))
        for name in names:
            src = os.path.join(staging, name)
            if self.local:
                os.replace(src, self.path(name))
            else:
                self.fs.put_file(src, self.path(name))
        item = TextInput(**marker["input"])
        self._put_bytes(self.file_key(item) + ".json", json.dumps(marker, sort_keys=True).encode())
        self.clear_error(item)  # a success replaces an earlier failure's record

    def clear_error(self, item: TextInput) -> None:
        """Remove the error marker an earlier failed build of ``item`` left, if any (so
        that processes waiting on this build do not fail with that old message)."""
        error = self.path(self.file_key(item) + ".error.json")
        with contextlib.suppress(FileNotFoundError):
            if self.local:
                os.remove(error)
            else:
                self.fs.rm_file(error)

    def _put_bytes(self, name: str, data: bytes) -> None:
        if self.local:
            os.makedirs(self.folder, exist_ok=True)
            write_atomic(self.path(name), data)
        else:
            self.fs.pipe_file(self.path(name), data)

    def read_manifest(self, digest: str) -> list[dict[str, Any]] | None:
        """The markers of a finished input list, or ``None``."""
        try:
            data = self.fs.cat_file(self.path(f"manifests/{digest}.json"))
        except FileNotFoundError:
            return None
        try:
            found = json.loads(data)
            if found.get("schema") != SCHEMA or not isinstance(found.get("files"), list):
                return None
            return list(found["files"])
        except (ValueError, AttributeError):
            return None  # torn or foreign: the markers are read instead

    def write_manifest(self, digest: str, markers: list[dict[str, Any]]) -> None:
        """Record a finished input list (best effort: a read-only cache still works)."""
        data = json.dumps({"schema": SCHEMA, "files": markers}).encode()
        try:
            if self.local:
                os.makedirs(self.path("manifests"), exist_ok=True)
            self._put_bytes(f"manifests/{digest}.json", data)
        except OSError:
            pass


def check_marker(data: bytes, item: TextInput, path: str) -> dict[str, Any]:
    """A done marker read from ``path``, checked against the input it is for.

    Raises:
        FormatError: not JSON, another schema, or another input's marker.
    """
    try:
        marker = json.loads(data)
        ok = isinstance(marker, dict) and isinstance(marker.get("files"), dict)
    except ValueError:
        ok = False
    if not ok:
        raise FormatError(f"{path}: not a text-cache marker; remove it to tokenize the file again")
    if marker.get("schema") != SCHEMA:
        raise FormatError(
            f"{path}: written by another streamload version (cache schema "
            f"{marker.get('schema')!r}, this one reads {SCHEMA!r}); remove it or use another "
            "cache_dir"
        )
    if marker.get("input") != asdict(item):
        raise FormatError(
            f"{path}: the marker is for {marker.get('input')!r}, not {asdict(item)!r} (a key "
            "collision or an edited cache); remove it to tokenize the file again"
        )
    return dict(marker)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return -1


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = fs.protocol
    return protocol if isinstance(protocol, tuple) else (protocol,)
