"""Chat options shared by ``streamload tokenize`` and a text source (docs/tokenize.md, "Chat").

A document may be a conversation: a ``messages`` field (``[{"role": …, "content": …}, …]``)
rendered with the tokenizer's own chat template, then tokenized. ``train_on`` says which of
its tokens get loss mask 1; these are the checks both configs run on the three options.
"""

from __future__ import annotations

import enum
from typing import Any

from streamload.config.checks import check_path, show, to_enum
from streamload.errors import ConfigError

__all__ = ["TrainOn", "check_chat_options"]


class TrainOn(str, enum.Enum):
    """Which tokens of a conversation are trained (loss mask 1)."""

    ASSISTANT = "assistant"
    """Every assistant answer: the template's ``{% generation %}`` blocks, as transformers'
    ``return_assistant_tokens_mask`` gives them (TRL's ``assistant_only_loss``)."""
    LAST = "last"
    """The last ``{% generation %}`` block only (the final assistant answer)."""
    ALL = "all"
    """Every token of the rendered conversation (any template, markers or not)."""


def check_chat_options(
    messages_field: Any, chat_template: Any, train_on: Any, where: str
) -> TrainOn:
    """Check the chat options of ``where`` (a tokenize config or a source); ``train_on`` as
    a :class:`TrainOn` (``None``: the default, ``assistant``).

    Raises:
        ConfigError: a field name or template path that is not a non-empty string, an
            unknown ``train_on``, or ``chat_template`` / ``train_on`` set without
            ``messages_field``.
    """
    default = TrainOn.ASSISTANT if train_on is None else train_on
    trained = to_enum(TrainOn, default, f"{where}train_on")
    if chat_template is not None:
        check_path(chat_template, f"{where}chat_template")
    if messages_field is not None:
        check_path(messages_field, f"{where}messages_field")
        return trained
    given = [
        f"{name} = {show(value)}"
        for name, value in (("chat_template", chat_template), ("train_on", train_on))
        if value is not None and value != TrainOn.ASSISTANT
    ]
    if given:
        raise ConfigError(
            f"{where}{' and '.join(given)} only apply to conversations; set messages_field "
            "(the field holding each document's [{role, content}, ...] messages)"
        )
    return trained
