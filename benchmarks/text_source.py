"""Text sources (issue 32): cold tokenization against ``streamload tokenize``, and warm start.

One synthetic English-like JSONL corpus (``--files`` files of ``--mb-per-file`` MB: Zipf
word frequencies over a 40,000-word lexicon of made-up words, sentences, commas, numbers,
paragraphs) and one byte-level BPE of ``--vocab`` ids trained on it with ``tokenizers`` (no
real ``tokenizer.json`` is available offline) are written once into ``--data-dir``. Then,
interleaved per repeat, each case in a fresh interpreter, timed inside it after its imports:

* ``tokenize Np``: ``streamload tokenize --keep-order --format megatron`` (the library's
  ``tokenize(TokenizeConfig(...))``) with N processes into a fresh folder: the baseline;
* ``text source Np``: the text source's cold build, ``prepare_text_source(source, storage,
  processes=N)`` into a fresh ``cache_dir`` (listing, the tokenizer's hash, every file
  tokenized, markers, the manifest).

Both write the same Megatron bytes (checked on the first repeat) and count the same tokens.
The ratios are text source / tokenize in rate at equal processes (issue 32's goal: >= 0.8):
of the medians, paired (the median of each repeat's own ratio: its two runs are adjacent in
time, so less exposed to a shared machine's drifting load) and in CPU per token (the child's
and its reaped workers' user + system time). The same comparison runs at 1 process over
``--tiny-files`` files of one short document each (the per-file cost).

Warm start: after each corpus, ``describe_source`` of the text source over the cache its
last cold build left (the input listing, the manifest, the cached catalog), against
``describe_source`` of a plain Megatron token source over the same cache folder.

``--profile`` prints cProfile's top functions of one inline (1 process) run of each path
and stops.

Example:
    python benchmarks/text_source.py --files 16 --mb-per-file 2 --repeats 3
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import pstats
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from _common import add_common_args, emit, int_list, machine_info, median, run_child
from _text_corpus import make_corpus, make_tiny_corpus, train_tokenizer


def _cpu() -> float:
    """CPU seconds of this process and its reaped children (the pool's workers)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _text_source(inputs: str, tokenizer: str, cache: str) -> Any:
    from streamload.config import SourceConfig

    return SourceConfig(name="web", path=inputs, tokenizer=tokenizer, eos_token_id=0,
                        cache_dir=cache)  # fmt: skip


def _run_case(job: dict[str, Any]) -> dict[str, Any]:
    """One measured call (in a child): ``tokenize``, ``text`` or ``describe``."""
    from streamload.config.storage import StorageConfig

    storage = StorageConfig(cache_dir=job["storage"])
    if job["case"] == "tokenize":
        from streamload.tokenize import TokenizeConfig, tokenize

        config = TokenizeConfig(
            documents=(job["inputs"] + "/*.jsonl",), destination=job["out"],
            tokenizer=job["tokenizer"], eos_token_id=0, format="megatron", keep_order=True,
            processes=job["processes"], id_field=None,
        )  # fmt: skip
        return _timed(lambda: tokenize(config).tokens)
    if job["case"] == "text":
        from streamload.catalog.text_source import prepare_text_source

        source = _text_source(job["inputs"], job["tokenizer"], job["out"])
        call = lambda: prepare_text_source(source, storage, processes=job["processes"])  # noqa: E731
        return _timed(lambda: call().total("tokens"))
    from streamload.catalog.sources import describe_source
    from streamload.config import SourceConfig

    if job["plain"]:
        source = SourceConfig(name="web", path=job["out"], format="megatron")
    else:
        source = _text_source(job["inputs"], job["tokenizer"], job["cache"])
    return _timed(lambda: len(describe_source(source, None, storage).shards))


def _timed(call: Any) -> dict[str, Any]:
    cpu, start = _cpu(), time.perf_counter()
    value = call()
    return {"seconds": time.perf_counter() - start, "cpu": _cpu() - cpu, "value": value}


def child(job: dict[str, Any]) -> None:
    """The child's entry: import the measured tree, run the case, print its JSON."""
    sys.path.insert(0, job["tree"])
    print(json.dumps(_run_case(job)))


def measure(job: dict[str, Any]) -> dict[str, Any]:
    """Run ``job`` in a fresh interpreter; its timing and value."""
    result = run_child([__file__, "--child", json.dumps(job)], timeout=1800).result
    assert result is not None
    return result


def bins_digest(folder: Path) -> str:
    """The sha256 of every ``.bin`` and ``.idx`` under ``folder``, in size order (names
    differ between the two layouts; the bytes do not)."""
    digests = sorted(
        hashlib.sha256(p.read_bytes()).hexdigest()
        for p in folder.rglob("*")
        if p.suffix in (".bin", ".idx") and ".staging" not in p.parts
    )
    return hashlib.sha256("".join(digests).encode()).hexdigest()


def cold(
    args: argparse.Namespace,
    repeats: int,
    base: dict[str, Any],
    scratch: Path,
    processes: list[int],
) -> dict[str, list[Any]]:
    """Interleaved cold runs of ``base["inputs"]``: for each repeat and process count,
    tokenize then the text source, each into a fresh folder; the first repeat checks that
    both wrote the same bytes. The text source's last cache is kept in ``scratch/cache``."""
    runs: dict[str, list[Any]] = {}
    for repeat in range(repeats):
        for p in processes:
            digests = []
            for case in ("tokenize", "text"):
                out = scratch / ("cache" if case == "text" else "tokenized")
                shutil.rmtree(out, ignore_errors=True)
                shutil.rmtree(scratch / "storage", ignore_errors=True)
                job = {**base, "case": case, "processes": p, "out": str(out)}
                runs.setdefault(f"{case} {p}", []).append(measure(job))
                if repeat == 0:
                    digests.append(bins_digest(out))
            assert len(set(digests)) <= 1, f"{p} processes: the two paths wrote other bytes"
            print(f"{base['inputs']}: repeat {repeat + 1}, {p} process(es)", file=sys.stderr)
    shutil.rmtree(scratch / "tokenized", ignore_errors=True)
    return runs


def cold_rows(runs: dict[str, list[Any]], processes: list[int], label: str) -> list[dict[str, Any]]:
    """Per process count: both paths' medians, and the text source's rate over
    tokenize's as a ratio of medians, as the median of the repeats' paired ratios (the
    two runs of a repeat are adjacent in time: less of the machine's drifting load) and
    in CPU per token."""
    rows = []
    for p in processes:
        tok, text = runs[f"tokenize {p}"], runs[f"text {p}"]
        tokens = tok[0]["value"]
        assert all(r["value"] == tokens for r in tok + text), "token counts differ"
        paired = median(t["seconds"] / x["seconds"] for t, x in zip(tok, text, strict=True))
        for name, results in (("streamload tokenize --keep-order", tok), ("text source", text)):
            seconds = median(r["seconds"] for r in results)
            cpu = median(r["cpu"] for r in results)
            is_text = results is text
            rows.append({
                "case": f"{label}: {name}", "p": p, "s": seconds, "tokens": tokens,
                "mtok": tokens / seconds / 1e6,
                "cpu": cpu / (tokens / 1e6),
                "ratio": median(r["seconds"] for r in tok) / seconds if is_text else None,
                "paired": paired if is_text else None,
                "cpu_ratio": median(r["cpu"] for r in tok) / cpu if is_text else None,
                "all": " / ".join(f"{r['seconds']:.2f}" for r in results),
            })  # fmt: skip
    return rows


def warm(
    args: argparse.Namespace, base: dict[str, Any], scratch: Path, label: str
) -> list[dict[str, Any]]:
    """Interleaved warm ``describe_source`` of the text source over the cache ``cold``
    left in ``scratch/cache`` and of a plain token source over its settings folder."""
    cache = scratch / "cache"
    (folder,) = [p for p in cache.iterdir() if p.is_dir()]
    job = {**base, "out": str(folder), "cache": str(cache), "case": "describe"}
    plain, text = {**job, "plain": True}, {**job, "plain": False}
    shutil.rmtree(scratch / "storage", ignore_errors=True)
    for first in (plain, text):  # fill the catalog cache: every later start is warm
        measure(first)
    runs: dict[str, list[Any]] = {"plain": [], "text": []}
    for _ in range(args.repeats):
        runs["plain"].append(measure(plain))
        runs["text"].append(measure(text))
    shutil.rmtree(cache, ignore_errors=True)
    base_ms = median(r["seconds"] for r in runs["plain"]) * 1e3
    rows = []
    for key, name in (("plain", "plain token source"), ("text", "text source")):
        ms = median(r["seconds"] for r in runs[key]) * 1e3
        rows.append(
            {
                "case": f"{label}: {name}",
                "ms": ms,
                "cpu": median(r["cpu"] for r in runs[key]) * 1e3,
                "shards": runs[key][0]["value"],
                "ratio": ms / base_ms,
                "all": " / ".join(f"{r['seconds'] * 1e3:.0f}" for r in runs[key]),
            }
        )
    return rows


def profile(base: dict[str, Any], scratch: Path, top: int) -> None:
    """cProfile of one inline run of each path (this process), top functions by own time."""
    sys.path.insert(0, base["tree"])
    for case in ("tokenize", "text"):
        out = scratch / f"profile-{case}"
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(scratch / "storage", ignore_errors=True)
        job = {**base, "case": case, "processes": 1, "out": str(out)}
        prof = cProfile.Profile()
        result = prof.runcall(_run_case, job)
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(top)
        print(f"\n### {case}: {result['seconds']:.2f} s\n{text.getvalue()}", file=sys.stderr)
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(json.loads(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--mb-per-file", type=float, default=2.0)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--processes", type=int_list, default=[1, 2])
    parser.add_argument("--tiny-files", type=int, default=10_000, help="0: skip")
    parser.add_argument("--tiny-repeats", type=int, default=3, help="cold repeats, tiny files")
    parser.add_argument("--profile", action="store_true", help="cProfile each path, then stop")
    parser.add_argument("--profile-top", type=int, default=25)
    args = parser.parse_args()
    import streamload

    tree = str(Path(streamload.__file__).resolve().parents[1])
    data = Path(args.data_dir) / f"text-{args.files}x{args.mb_per_file:g}mb"
    make_corpus(data, args.files, args.mb_per_file)
    tokenizer = data / f"tokenizer-{args.vocab}.json"
    train_tokenizer(data, tokenizer, args.vocab)
    scratch = Path(args.data_dir) / "text-scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    base = {"tree": tree, "inputs": str(data / "in"), "tokenizer": str(tokenizer),
            "storage": str(scratch / "storage")}  # fmt: skip
    if args.profile:
        profile(base, scratch, args.profile_top)
        return
    machine = machine_info()
    label = f"{args.files} files"
    cold_table = cold_rows(cold(args, args.repeats, base, scratch, args.processes),
                           args.processes, label)  # fmt: skip
    warm_table = warm(args, base, scratch, label)
    if args.tiny_files:
        tiny = Path(args.data_dir) / f"text-tiny-{args.tiny_files}"
        make_tiny_corpus(tiny, args.tiny_files)
        tiny_base, label = {**base, "inputs": str(tiny / "in")}, f"{args.tiny_files:,} tiny files"
        cold_table += cold_rows(cold(args, args.tiny_repeats, tiny_base, scratch, [1]), [1], label)
        warm_table += warm(args, tiny_base, scratch, label)
    size = sum(p.stat().st_size for p in (data / "in").glob("*.jsonl"))
    emit_cold(args, cold_table, f"{size / 1e6:.1f} MB, {cold_table[0]['tokens']:,} tokens", machine)
    emit_warm(args, warm_table, machine)


def emit_cold(
    args: argparse.Namespace, rows: list[dict[str, Any]], size: str, machine: dict[str, Any]
) -> None:
    """The cold table into RESULTS.md."""
    emit(
        args,
        "Text sources (issue 32): cold build vs streamload tokenize --keep-order",
        rows,
        [
            ("case", "case", ""),
            ("p", "processes", "d"),
            ("s", "seconds", ".2f"),
            ("mtok", "M tokens/s", ".3f"),
            ("cpu", "CPU s per M tokens", ".2f"),
            ("ratio", "rate / tokenize", ".2f"),
            ("paired", "paired", ".2f"),
            ("cpu_ratio", "CPU / token, tokenize / text", ".2f"),
            ("all", "each repeat (s)", ""),
        ],
        [
            f"{args.files} files: JSONL of English-like text ({size}, EOS included), a "
            f"byte-level BPE of {args.vocab} ids trained on it; medians of {args.repeats} "
            "interleaved repeats, each case a fresh interpreter timed after its imports "
            "(tokenizer load, listing and the pool's start included)"
            + (
                f"; {args.tiny_files:,} tiny files: one 10-word document each, medians of "
                f"{args.tiny_repeats}."
                if args.tiny_files
                else "."
            ),
            "tokenize = `tokenize(TokenizeConfig(keep_order=True, format='megatron', "
            "id_field=None))` into a fresh folder; text source = `prepare_text_source(source, "
            "storage, processes=N)` into a fresh cache_dir. Same .bin/.idx bytes (checked).",
            "rate / tokenize = ratio of the median rates; paired = median over repeats of "
            "tokenize's time / the text source's in the same repeat (adjacent runs); CPU = the "
            "child's and its reaped workers' user+system time over the same span.",
        ],
        machine,
    )


def emit_warm(
    args: argparse.Namespace, rows: list[dict[str, Any]], machine: dict[str, Any]
) -> None:
    """The warm table into RESULTS.md."""
    emit(
        args,
        "Text sources (issue 32): warm start vs a plain token source over the same cache",
        rows,
        [
            ("case", "case", ""),
            ("ms", "wall ms", ".1f"),
            ("cpu", "CPU ms", ".1f"),
            ("shards", "shards", ""),
            ("ratio", "ratio to plain", ".2f"),
            ("all", "each repeat (ms)", ""),
        ],
        [
            "`describe_source` in a fresh interpreter, timed after the imports, once the "
            "text cache (the last cold build's) and the catalog are filled (an untimed first "
            "call of each); plain = a Megatron source whose path is the cache's settings "
            f"folder. Medians of {args.repeats} interleaved repeats.",
        ],
        machine,
    )


if __name__ == "__main__":
    main()
