"""What rendering a chat template costs beside encoding the same text (issue 33, item 2).

``streamload tokenize --messages-field`` and a chat text source render each conversation with
the tokenizer's chat template (jinja2, transformers' environment, ``{% generation %}`` spans
tracked), encode the text with offsets and mark the trained tokens. This script times, on
``--conversations`` synthetic conversations (1 to 4 exchanges of 20 to 120 words) and the
ChatML fixture (tests/fixtures/chat/chatml: a tiny BPE, so the encoding is cheap and the
template's share shows at its largest):

* ``encode text (baseline)``: ``DocumentEncoder.encode`` of the rendered texts (what a plain
  text source pays: ids only, no offsets);
* ``render``: ``ChatRenderer.render`` of every conversation (messages checked, template run);
* ``encode with masks``: ``encode_chat`` of the rendered texts (ids, offsets, masks);
* ``render + encode (streamload)``: both, what a conversation costs end to end.

Cases run round-robin within each repeat; medians; ratios to the baseline of the same run.

    python benchmarks/chat_tokenize.py --conversations 2000 --repeats 7
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import add_common_args, emit, median

from streamload.config.chat import TrainOn
from streamload.formats.encoder import DocumentEncoder
from streamload.tokenize.chat import ChatRenderer, encode_chat, load_chat_template

TOKENIZER = Path(__file__).resolve().parents[1] / "tests/fixtures/chat/chatml/tokenizer.json"
WORDS = ["the", "capital", "of", "France", "is", "Paris", "a", "haiku", "about", "autumn",
         "leaves", "river", "quiet", "water"]  # fmt: skip


def conversations(n: int, seed: int = 0) -> list[list[dict[str, str]]]:
    rng = random.Random(seed)

    def words() -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 120)))

    out = []
    for _ in range(n):
        messages = [{"role": "system", "content": words()}] if rng.random() < 0.5 else []
        for _ in range(rng.randint(1, 4)):
            messages += [{"role": "user", "content": words()}]
            messages += [{"role": "assistant", "content": words()}]
        out.append(messages)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_common_args(parser)
    parser.add_argument("--conversations", type=int, default=2000)
    args = parser.parse_args()
    convs = conversations(args.conversations)
    encoder = DocumentEncoder(str(TOKENIZER), None, None)
    renderer = ChatRenderer(load_chat_template(str(TOKENIZER)), "messages", TrainOn.ASSISTANT)
    rendered = [renderer.render(m) for m in convs]
    texts = [t for t, _ in rendered]
    spans = [s for _, s in rendered]
    tokens = sum(int(ids.size) for ids in encoder.encode(texts))

    def both() -> Any:
        done = [renderer.render(m) for m in convs]
        return encode_chat(encoder, [t for t, _ in done], [s for _, s in done])

    cases: dict[str, Callable[[], Any]] = {
        "encode text (baseline)": lambda: encoder.encode(texts),
        "render": lambda: [renderer.render(m) for m in convs],
        "encode with masks": lambda: encode_chat(encoder, texts, spans),
        "render + encode (streamload)": both,
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for case in cases.values():  # warm: the tokenizer's threads, jinja's caches
        case()
    for _ in range(args.repeats):
        for name, case in cases.items():
            start = time.perf_counter()
            case()
            times[name].append(time.perf_counter() - start)
    base = median(times["encode text (baseline)"])
    rows = [
        {
            "case": name,
            "ms": median(t) * 1e3,
            "us_per_conversation": median(t) / len(convs) * 1e6,
            "mtok_s": tokens / median(t) / 1e6,
            "ratio": median(t) / base,
        }
        for name, t in times.items()
    ]
    columns = [
        ("case", "case", ""),
        ("ms", "ms (median)", ".1f"),
        ("us_per_conversation", "µs / conversation", ".1f"),
        ("mtok_s", "M tokens/s", ".2f"),
        ("ratio", "× baseline", ".2f"),
    ]
    notes = [
        f"{len(convs):,} conversations, {tokens:,} tokens ({tokens / len(convs):.0f} a "
        f"conversation), {args.repeats} repeats, ChatML fixture tokenizer (vocabulary 600).",
        "Rendering is per conversation in Python (jinja2); the encodings are one "
        "encode_batch call (Rust threads).",
    ]
    emit(args, "Chat templates: render and mask against plain encoding", rows, columns, notes)


if __name__ == "__main__":
    main()
