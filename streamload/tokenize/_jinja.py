"""The Jinja environment chat templates are rendered in, as transformers builds it.

transformers (``utils/chat_template_utils.py``, 5.x) renders a template in an
``ImmutableSandboxedEnvironment`` with ``trim_blocks`` and ``lstrip_blocks``, the
``loopcontrols`` extension and its own ``{% generation %}`` tag, a ``tojson`` filter that
keeps non-ASCII text and HTML characters as they are, the globals ``raise_exception``,
``strftime_now``, ``dict`` and a ``namespace`` that refuses underscore names. The same
environment is built here, so a template renders to the same text.

``{% generation %}…{% endgeneration %}`` marks text the model generates (an assistant's
answer). Rendering with :func:`render_tracked` records each block's ``[start, end)``
characters in the output: the output is consumed block by block (``Template.generate``), so
a block's start is the length of what was yielded before it (transformers' own way, with the
same result for templates that buffer output, e.g. in a ``{% set %}`` block).

This module imports ``jinja2`` (the ``tokenize`` extra): import it only for a conversation.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["compile_template", "render_tracked"]

Spans = list[tuple[int, int]]


class _GenerationTag(jinja2.ext.Extension):
    """``{% generation %}`` body ``{% endgeneration %}``: renders the body, and while a
    render is tracked records where it landed in the output."""

    tags = {"generation"}  # noqa: RUF012 - jinja2.ext.Extension declares a plain set

    def __init__(self, environment: jinja2.Environment) -> None:
        super().__init__(environment)
        self.tracked: tuple[list[str], Spans] | None = None

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        """The tag's body as a call block of :meth:`_generation`."""
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_generation")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _generation(self, caller: Any) -> str:
        text = str(caller())
        if self.tracked is not None:
            blocks, spans = self.tracked
            start = sum(map(len, blocks))
            spans.append((start, start + len(text)))
        return text


def _raise_exception(message: Any) -> None:
    """What a template calls to refuse its input; the message is the template's own."""
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson escapes HTML characters (<, >, &, '), which a prompt must keep
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _TemplateDict:
    """``dict(...)`` and ``dict.fromkeys(...)`` without exposing the type itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class _Namespace(jinja2.utils.Namespace):
    """Jinja's ``namespace`` refusing underscore names (no reach into Python internals)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # Namespace's own: `self` may be a key
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"a chat template cannot store the underscore name {name!r} on a namespace"
            )


def compile_template(source: str) -> jinja2.Template:
    """``source`` compiled in a fresh environment of its own (module docstring).

    Raises:
        jinja2.TemplateSyntaxError: the template does not parse.
    """
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_GenerationTag, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _Namespace
    return env.from_string(source)


@contextmanager
def _tracking(template: jinja2.Template, blocks: list[str], spans: Spans) -> Iterator[None]:
    tag = template.environment.extensions[_GenerationTag.identifier]
    assert isinstance(tag, _GenerationTag)
    if tag.tracked is not None:
        raise RuntimeError("a chat template is being rendered already (not reentrant)")
    tag.tracked = (blocks, spans)
    try:
        yield
    finally:
        tag.tracked = None


def render_tracked(template: jinja2.Template, **variables: Any) -> tuple[str, Spans]:
    """The rendered text and the ``[start, end)`` characters of each ``{% generation %}``
    block in it, in the order they were rendered.

    Raises:
        jinja2.TemplateError: the template refused its input (``raise_exception``) or failed.
        Exception: whatever else a template's expressions raise (``TypeError``…).
    """
    blocks: list[str] = []
    spans: Spans = []
    with _tracking(template, blocks, spans):
        for block in template.generate(**variables):
            blocks.append(block)
    return "".join(blocks), spans
