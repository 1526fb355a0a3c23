"""Conversations → tokens and loss masks with the tokenizer's chat template, as transformers.

A document's ``messages`` field (``[{"role": "user", "content": "Hi"}, …]``) is rendered with
the tokenizer's own chat template and tokenized, so that the ids and the mask equal
transformers' ``apply_chat_template(messages, tokenize=True, return_dict=True,
return_assistant_tokens_mask=True)`` (5.x) token for token:

1. **The template** (:func:`load_chat_template`): a file given explicitly (a ``.jinja``
   file, or a ``tokenizer_config.json`` whose ``chat_template`` is used), else
   ``chat_template.jinja`` beside the ``tokenizer.json``, else the ``chat_template`` of the
   ``tokenizer_config.json`` beside it (transformers' order; a list of named templates gives
   its ``default``). The named special tokens of that ``tokenizer_config.json``
   (``bos_token``, ``eos_token``, …) are the template's variables, as transformers passes
   them.
2. **The messages** (:func:`parse_messages`): each an object with a string ``role`` and a
   string ``content`` (a list of content parts is refused: join its text first); keys whose
   value is null are dropped, and ``reasoning_content`` / ``thinking`` / ``reasoning`` are
   aliased, as transformers normalizes messages.
3. **Rendering** in transformers' sandboxed environment (:mod:`streamload.tokenize._jinja`)
   with ``add_generation_prompt=False``; each ``{% generation %}`` block's characters are
   recorded.
4. **Tokens**: the rendered text encoded without the tokenizer's own special tokens (the
   template writes them). **Mask** (:func:`generation_mask`): a token is trained when its
   characters overlap a trained block (transformers' rule). ``train_on`` picks the blocks:
   all of them (``assistant``), the last (``last``), or every token (``all``).

A template without ``{% generation %}`` cannot tell the assistant's text from the prompt
(transformers then returns a mask of zeros): with it only ``train_on = "all"`` is accepted,
and ``assistant`` / ``last`` are refused naming the template (give a training template with
the markers, such as TRL's ``*_training.jinja``, with ``--chat-template``).

Example (ChatML, ``train_on = "assistant"``): ``<|im_start|>user\\nHi<|im_end|>\\n
<|im_start|>assistant{% generation %}\\nHello<|im_end|>\\n{% endgeneration %}`` → the
tokens of ``\\nHello<|im_end|>\\n`` have mask 1, the rest 0.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from streamload.config.chat import TrainOn
from streamload.errors import ConfigError
from streamload.formats.encoder import DocumentEncoder

__all__ = [
    "ChatRenderer",
    "ChatTemplate",
    "check_train_on",
    "encode_chat",
    "generation_mask",
    "load_chat_template",
    "parse_messages",
]

TEMPLATE_FILE = "chat_template.jinja"
"""transformers' template file beside the tokenizer (preferred over the config's entry)."""
CONFIG_FILE = "tokenizer_config.json"
_SPECIAL_TOKENS = (
    "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
)  # fmt: skip
"""The named special tokens transformers passes to a template (``special_tokens_map``)."""
_GENERATION = re.compile(r"\{\%-?\s*generation\s*-?\%\}")
_REASONING = ("reasoning_content", "thinking", "reasoning")

Spans = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class ChatTemplate:
    """A chat template's text, where it was found and the special tokens it sees."""

    source: str
    origin: str
    special_tokens: tuple[tuple[str, str], ...] = ()

    @property
    def sha256(self) -> str:
        """Of the template and its special tokens (what decides the rendered text)."""
        data = json.dumps([self.source, list(self.special_tokens)])
        return hashlib.sha256(data.encode()).hexdigest()

    @property
    def marks_generation(self) -> bool:
        """Whether the template has ``{% generation %}`` blocks (transformers' test)."""
        return _GENERATION.search(self.source) is not None


def load_chat_template(tokenizer: str, template: str | None = None) -> ChatTemplate:
    """The chat template of ``tokenizer`` (a ``tokenizer.json`` path), or ``template``.

    Raises:
        ConfigError: no template found, or a file that cannot be read or holds none.
    """
    folder = os.path.dirname(os.path.abspath(tokenizer))
    config_path = os.path.join(folder, CONFIG_FILE)
    config = _read_json(config_path) if os.path.isfile(config_path) else {}
    special = tuple((k, v) for k in _SPECIAL_TOKENS if (v := _token_text(config.get(k))))
    if template is not None:
        if template.endswith(".json"):
            return ChatTemplate(_config_template(_read_json(template), template), template, special)
        return ChatTemplate(_read_text(template), template, special)
    jinja_path = os.path.join(folder, TEMPLATE_FILE)
    if os.path.isfile(jinja_path):
        return ChatTemplate(_read_text(jinja_path), jinja_path, special)
    if config.get("chat_template") is not None:
        return ChatTemplate(_config_template(config, config_path), config_path, special)
    raise ConfigError(
        f"tokenizer {tokenizer}: no chat template found (looked for {jinja_path} and a "
        f"chat_template in {config_path}); give one with --chat-template / chat_template "
        "(a .jinja file or a tokenizer_config.json)"
    )


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"chat template {path}: cannot read it ({exc})") from None


def _read_json(path: str) -> dict[str, Any]:
    try:
        data = json.loads(_read_text(path))
    except ValueError as exc:
        raise ConfigError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object (a tokenizer_config.json)")
    return data


def _config_template(config: dict[str, Any], path: str) -> str:
    """The ``chat_template`` of a tokenizer config: a string, or the ``default`` of a list of
    ``{"name", "template"}`` entries (transformers' named templates)."""
    found = config.get("chat_template")
    if isinstance(found, list):
        named = {e.get("name"): e.get("template") for e in found if isinstance(e, dict)}
        if not isinstance(named.get("default"), str):
            raise ConfigError(
                f"{path}: chat_template lists templates {sorted(map(str, named))} but no "
                "'default'; give the one to use with --chat-template (a .jinja file)"
            )
        found = named["default"]
    if not isinstance(found, str) or not found:
        raise ConfigError(f"{path}: no chat_template string in it")
    return found


def _token_text(value: Any) -> str | None:
    """A special token as a config writes it: a string, or an ``AddedToken`` object."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def parse_messages(value: Any) -> list[dict[str, Any]]:
    """The messages of a document, checked and normalized as transformers does (module
    docstring); an empty list stays empty.

    Raises:
        ValueError: not a list of objects with a string ``role`` and ``content`` (the message
            says which message and why).
    """
    if value is None:
        raise ValueError("is missing or null; expected a list of {role, content} messages")
    if not isinstance(value, list):
        raise ValueError(f"is a {type(value).__name__}, not a list of {{role, content}} messages")
    messages = []
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise ValueError(f"message {i} is a {type(message).__name__}, not an object")
        message = {k: v for k, v in message.items() if v is not None}
        role = message.get("role")
        if not isinstance(role, str):
            what = "has no 'role'" if role is None else f"has a {type(role).__name__} role"
            raise ValueError(f"message {i} {what}; expected a string")
        content = message.get("content")
        if not isinstance(content, str):
            if content is None:
                raise ValueError(f"message {i} ({role}) has no 'content'; expected a string")
            hint = "; join its parts' text into one string" if isinstance(content, list) else ""
            raise ValueError(
                f"message {i} ({role}) has a {type(content).__name__} content, not a string{hint}"
            )
        reasoning = next((message[k] for k in _REASONING if k in message), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        messages.append(message)
    return messages


def check_train_on(template: ChatTemplate, train_on: TrainOn | str) -> TrainOn:
    """``train_on`` as a :class:`~streamload.config.chat.TrainOn`, checked against the
    template (no ``jinja2`` needed).

    Raises:
        ConfigError: ``assistant`` or ``last`` with a template without ``{% generation %}``.
    """
    trained = TrainOn(train_on)
    if trained is not TrainOn.ALL and not template.marks_generation:
        raise ConfigError(
            f"chat template {template.origin} has no {{% generation %}} block, so the "
            f'assistant\'s tokens cannot be told from the prompt; train_on = "{trained.value}" '
            "needs a template that marks them (a training template such as TRL's "
            "*_training.jinja, given with --chat-template / chat_template), or use "
            'train_on = "all"'
        )
    return trained


class ChatRenderer:
    """Renders documents' messages with a template: the text and its trained spans.

    Args:
        template: The chat template.
        messages_field: The field of the messages (dotted: nested), for messages.
        train_on: Which blocks are trained (:class:`~streamload.config.chat.TrainOn`).

    Raises:
        ConfigError: ``jinja2`` is missing, the template does not parse, or ``train_on``
            needs ``{% generation %}`` blocks the template lacks.
    """

    def __init__(self, template: ChatTemplate, messages_field: str, train_on: TrainOn) -> None:
        self.template = template
        self.messages_field = messages_field
        self.train_on = check_train_on(template, train_on)
        try:
            from streamload.tokenize import _jinja
        except ImportError as exc:
            raise ConfigError(
                f"rendering chat templates needs jinja2 ({exc}): pip install 'streamload[chat]'"
            ) from None
        self._render = _jinja.render_tracked
        try:
            self._compiled = _jinja.compile_template(template.source)
        except Exception as exc:  # jinja2.TemplateSyntaxError: line and message
            line = getattr(exc, "lineno", None)
            where = f" line {line}" if line else ""
            raise ConfigError(f"chat template {template.origin}{where}: {exc}") from None

    def render(self, value: Any) -> tuple[str, Spans | None]:
        """A document's rendered text and trained ``[start, end)`` characters (``None``:
        every token, ``train_on = "all"``); ``("", ())`` for no messages.

        Raises:
            ValueError: bad messages, or the template refused or failed on them.
        """
        messages = parse_messages(value)
        if not messages:
            return "", ()
        variables = dict(self.template.special_tokens)
        try:
            text, spans = self._render(
                self._compiled, messages=messages, tools=None, documents=None,
                add_generation_prompt=False, **variables,
            )  # fmt: skip
        except Exception as exc:  # the template's raise_exception, or its own failure
            import jinja2

            why = str(exc) if isinstance(exc, jinja2.TemplateError) else repr(exc)
            raise ValueError(
                f"could not be rendered by chat template {self.template.origin}: {why}"
            ) from None
        if self.train_on is TrainOn.ALL:
            return text, None
        if self.train_on is TrainOn.LAST:
            spans = spans[-1:]
        return text, tuple(spans)


def generation_mask(offsets: Sequence[tuple[int, int]], spans: Spans) -> np.ndarray:
    """Which tokens overlap a trained span, by transformers' single pass (bool, one per
    token): a token ``[s, e)`` is trained when the first span not ending at or before ``s``
    (spans and tokens taken in order) starts before ``e``.

    Example: offsets ``(0,2) (2,5) (5,5) (5,9)``, spans ``((3, 5),)`` → ``0 1 0 0``.
    """
    count = len(offsets)
    if not spans or not count:
        return np.zeros(count, dtype=bool)
    at = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    blocks = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    starts, ends = at[:, 0], at[:, 1]
    if np.all(np.diff(starts) >= 0) and np.all(np.diff(blocks[:, 1]) >= 0):
        # both in order: the pass's current span is the first whose end > token start
        first = np.searchsorted(blocks[:, 1], starts, side="right")
        inside = first < len(blocks)
        span_starts = blocks[np.minimum(first, len(blocks) - 1), 0]
        return inside & (ends > span_starts)
    return _mask_by_pass(at, blocks)


def _mask_by_pass(at: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """:func:`generation_mask` token by token (offsets or spans out of order)."""
    mask = np.zeros(len(at), dtype=bool)
    k = 0
    for t, (start, end) in enumerate(at.tolist()):
        while k < len(blocks) and start >= blocks[k, 1]:
            k += 1
        if k == len(blocks):
            break
        mask[t] = end > blocks[k, 0]
    return mask


def encode_chat(
    encoder: DocumentEncoder, texts: Sequence[str], spans: Sequence[Spans | None]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Token ids and loss masks of rendered conversations (``spans`` ``None``: all trained).

    Encoded without the tokenizer's special tokens (the template writes them); BOS/EOS, when
    configured, follow ``streamload tokenize``'s rule (added when absent: BOS untrained, EOS
    trained as the token before it).
    """
    from streamload.tokenize.loss_spans import add_bos_eos

    encodings = encoder.tokenizer.encode_batch(list(texts), add_special_tokens=False)
    ids_out, masks_out = [], []
    for trained, encoding in zip(spans, encodings, strict=True):
        ids = list(encoding.ids)
        if trained is None:
            mask = np.ones(len(ids), dtype=bool)
        else:
            mask = generation_mask(encoding.offsets, trained)
        ids_array, mask_array = add_bos_eos(encoder, ids, mask.tolist())
        ids_out.append(ids_array)
        masks_out.append(mask_array)
    return ids_out, masks_out
