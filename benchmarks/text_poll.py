"""What a rank waiting on other ranks' files costs an object store, per look (issue 32).

A text source whose cache is remote (``cache_dir = "s3://…"``) is filled by every rank at
once: each tokenizes its share, then waits for the others' markers
(``streamload/tokenize/text_build.py``). This script measures one *round* of that wait
against a loopback S3 server, for a cache folder holding ``--files`` input files of which
half are done (a ``.bin``, ``.idx`` and marker each) and half still pending:

* ``per-file`` (the baseline, kept here): for each pending file, a look for its marker and
  one for its error record (what the first version did every second);
* ``listing`` (``TextCache.names``, what a rank does now): one listing of the folder, the
  pending files looked up in it.

Rounds alternate between the two within each repeat; the table gives medians of the HTTP
requests and seconds per round, and the baseline's over the listing's.

Example:
    python benchmarks/text_poll.py --files 100,1000 --repeats 5
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _common import add_common_args, emit, int_list, median
from _servers import s3_server

REPO = Path(__file__).resolve().parents[1]
TOKENIZER = REPO / "tests" / "golden" / "tokenize" / "tokenizer.json"


class RequestCounter:
    """Counts the HTTP requests s3fs sends (aiobotocore's endpoint, patched in)."""

    def __init__(self) -> None:
        import aiobotocore.endpoint as endpoint

        self.count = 0
        real = endpoint.AioEndpoint._send

        async def send(inner: Any, request: Any) -> Any:
            self.count += 1
            return await real(inner, request)

        endpoint.AioEndpoint._send = send  # type: ignore[method-assign]


def make_cache(options: dict[str, Any], bucket: str, files: int) -> tuple[Any, list[Any]]:
    """A settings folder of ``files`` inputs, the first half done; the pending half."""
    from streamload.tokenize.text_cache import TextCache, TextInput, TextSettings

    settings = TextSettings(tokenizer=str(TOKENIZER), bos_token_id=None, eos_token_id=0)
    cache = TextCache(f"s3://{bucket}/cache-{files}", settings, options)
    inputs = [TextInput(f"s3://{bucket}/in/{i:06d}.jsonl", f"{i:06d}.jsonl", 1000 + i, f'"{i}"')
              for i in range(files)]  # fmt: skip
    done = {}
    for item in inputs[: files // 2]:
        key = cache.file_key(item)
        for name in (f"{key}-00000.bin", f"{key}-00000.idx", f"{key}.json"):
            done[cache.path(name)] = b"x"
    cache.fs.pipe(done)  # concurrent uploads
    return cache, inputs[files // 2 :]


def per_file_round(cache: Any, pending: list[Any]) -> int:
    """The first version's round: each pending file's marker, then its error record."""
    found = 0
    for item in pending:
        if cache.marker(item) is not None or cache.error(item) is not None:
            found += 1
    return found


def listing_round(cache: Any, pending: list[Any]) -> int:
    """Today's round: one listing, the pending files looked up in it."""
    names = cache.names()
    return sum(f"{cache.file_key(i)}.json" in names for i in pending)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--files", type=int_list, default=[100, 1000], help="input files")
    parser.add_argument("--server", default="moto", help="moto, s3rver or auto")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    sys.path.insert(0, str(REPO))
    counter = RequestCounter()
    rounds: dict[str, Callable[[Any, list[Any]], int]] = {
        "per-file": per_file_round, "listing": listing_round,
    }  # fmt: skip
    rows: list[dict[str, Any]] = []
    with s3_server(args.server) as server:
        options = server.storage_options()
        bucket = f"poll{uuid.uuid4().hex[:8]}"
        server.client().create_bucket(Bucket=bucket)
        for files in args.files:
            cache, pending = make_cache(options, bucket, files)
            seconds: dict[str, list[float]] = {name: [] for name in rounds}
            requests: dict[str, list[int]] = {name: [] for name in rounds}
            for _ in range(args.repeats):
                for name, run in rounds.items():
                    before, start = counter.count, time.perf_counter()
                    if run(cache, pending):
                        sys.exit(f"{name}: a pending file was found done")
                    seconds[name].append(time.perf_counter() - start)
                    requests[name].append(counter.count - before)
            base_s, base_r = median(seconds["per-file"]), median(requests["per-file"])
            for name in rounds:
                took, asked = median(seconds[name]), median(requests[name])
                rows.append({
                    "files": files, "pending": len(pending), "scheme": name,
                    "requests": asked, "seconds": took,
                    "requests_ratio": base_r / asked, "seconds_ratio": base_s / took,
                })  # fmt: skip
    columns = [
        ("files", "files", ","), ("pending", "pending", ","), ("scheme", "one round", "s"),
        ("requests", "requests", ",.0f"), ("seconds", "med (s)", ".3f"),
        ("requests_ratio", "per-file / this (requests)", ".1f"),
        ("seconds_ratio", "per-file / this (s)", ".1f"),
    ]  # fmt: skip
    notes = [
        f"{args.server} S3 server on 127.0.0.1; half the files done (3 objects each), half "
        f"pending; medians of {args.repeats} alternating repeats; requests counted at "
        "aiobotocore's endpoint.",
        "A rank waits in rounds 1 s apart at first, growing to 10 s (POLL_MAX); the per-file "
        "scheme looked every second.",
    ]
    emit(args, "Text caches: one round of a rank waiting on others' files", rows, columns, notes)


if __name__ == "__main__":
    main()
