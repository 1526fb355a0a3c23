"""Tokens/s from a loopback S3 server (moto, through s3fs) vs the same files read locally,
with and without injected latency; and time to first batch with 10,000 shards listed.

The S3 server and the latency proxy are the loopback servers of the tests (``tests/_s3.py``,
``tests/_http.py``): moto's S3 server in a child process on 127.0.0.1 and a threaded HTTP
proxy (in this process) that sleeps ``--latency`` seconds before forwarding each request.
Nothing leaves the machine. moto is a mock written in Python: each range request costs it
milliseconds of CPU on the same cores the loader uses, so "cold" rows measure moto as much as
streamload.

Cases (each a fresh loader over the same shuffled windows, ``--batches`` batches timed after
one warm-up batch):

* ``local``: the files on local disk (memmap; page cache warm).
* ``s3 cold``: an empty cache folder: every window is fetched from the server.
* ``s3 warm``: the same cache folder again: windows come from the disk cache.
* each S3 case with prefetch on (``storage.prefetch_batches``) and off (0).

Example:
    python benchmarks/remote.py --batches 200 --latency 0.05
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from _common import BENCH_DIR, add_common_args, emit, machine_info, median

sys.path.insert(0, str(BENCH_DIR.parent / "tests"))  # the tests' loopback servers
from _http import FaultPlan, FaultProxy
from _s3 import S3Server

import streamload


def write_corpus(folder: Path, shards: int, tokens: int, seed: int = 0) -> list[Path]:
    """``shards`` NPY files of ``tokens`` uint32 tokens each."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(shards):
        path = folder / f"shard_{i:05d}.npy"
        np.save(path, rng.integers(1, 128_000, tokens, dtype=np.uint32))
        paths.append(path)
    return paths


def time_loader(config: dict[str, Any], batch_size: int, batches: int, workers: int) -> float:
    """Input tokens/s over ``batches`` batches after one warm-up batch."""
    loader = streamload.build_loader(config, batch_size=batch_size, num_workers=workers)
    with loader:
        it = iter(loader)
        next(it)
        began = time.perf_counter()
        for _ in range(batches):
            batch = next(it)
        took = time.perf_counter() - began
    return batches * batch["input_ids"].numel() / took


def throughput_rows(args: argparse.Namespace, server: S3Server, work: Path) -> list[dict]:
    paths = write_corpus(work / "corpus", args.shards, args.shard_tokens)
    url = server.upload_folder(work / "corpus", "bench", uuid.uuid4().hex[:8])
    local_cfg = {
        "seq_len": args.seq_len,
        "seed": 1234,
        "sources": [{"name": "bench", "path": [str(p) for p in paths]}],
    }
    rows = []
    local = [time_loader(local_cfg, args.batch_size, args.batches, args.workers)]
    local += [
        time_loader(local_cfg, args.batch_size, args.batches, args.workers)
        for _ in range(args.repeats - 1)
    ]
    rows.append(
        {"case": "local", "latency": 0, "prefetch": "-", "whole": "-", "mtok": median(local) / 1e6}
    )
    # (prefetch batches, whole_shard_size): exact windows with and without prefetch, then
    # whole shards fetched into the cache in one request each (small-shard corpora).
    variants = [(args.prefetch_batches, 0), (0, 0), (args.prefetch_batches, 1 << 40)]
    for latency in (0.0, args.latency):
        plan = FaultPlan(latency=latency)
        with FaultProxy(server.endpoint, plan) as proxy:
            for prefetch, whole in variants:
                cold, warm = [], []
                for _ in range(args.repeats):
                    cache = tempfile.mkdtemp(dir=work)
                    config = {
                        **local_cfg,
                        "sources": [
                            {
                                "name": "bench",
                                "path": url,
                                "storage_options": server.storage_options(proxy.endpoint),
                            }
                        ],
                        "storage": {
                            "cache_dir": cache,
                            "prefetch_batches": prefetch,
                            "max_concurrency": args.max_concurrency,
                            "whole_shard_size": whole,
                        },
                    }
                    cold.append(time_loader(config, args.batch_size, args.batches, args.workers))
                    warm.append(time_loader(config, args.batch_size, args.batches, args.workers))
                for name, values in (("s3 cold", cold), ("s3 warm", warm)):
                    rows.append(
                        {
                            "case": name,
                            "latency": latency * 1000,
                            "prefetch": prefetch,
                            "whole": "yes" if whole else "no",
                            "mtok": median(values) / 1e6,
                        }
                    )
    for row in rows:
        row["ratio"] = row["mtok"] / rows[0]["mtok"]
    return rows


def first_batch_rows(args: argparse.Namespace, server: S3Server, work: Path) -> list[dict]:
    folder = work / "many"
    folder.mkdir()
    tokens = np.arange(args.many_tokens, dtype=np.uint16)
    for i in range(args.many_shards):
        tokens.tofile(folder / f"part_{i:05d}.bin")
    client, prefix = server.client(), uuid.uuid4().hex[:8]
    client.create_bucket(Bucket="many")
    began = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(
            pool.map(
                lambda p: client.upload_file(str(p), "many", f"{prefix}/{p.name}"),
                sorted(folder.iterdir()),
            )
        )
    print(
        f"uploaded {args.many_shards} shards in {time.perf_counter() - began:.1f} s",
        file=sys.stderr,
    )
    rows = []
    for name, path, options in (
        ("local", str(folder), {}),
        ("s3", f"s3://many/{prefix}", server.storage_options()),
    ):
        seconds = []
        for _ in range(args.repeats):
            config = {
                "seq_len": 64,
                "sources": [
                    {
                        "name": "many",
                        "path": path,
                        "format": "raw",
                        "dtype": "uint16",
                        "storage_options": options,
                    }
                ],
                "storage": {"cache_dir": tempfile.mkdtemp(dir=work)},
            }
            began = time.perf_counter()
            with streamload.build_loader(config, batch_size=8) as loader:
                next(iter(loader))
            seconds.append(time.perf_counter() - began)
        rows.append({"case": name, "shards": args.many_shards, "seconds": median(seconds)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    add_common_args(parser)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--batches", type=int, default=100, help="timed batches per case")
    parser.add_argument("--workers", type=int, default=2, help="thread workers")
    parser.add_argument("--latency", type=float, default=0.05, help="injected seconds")
    parser.add_argument("--prefetch-batches", type=int, default=16)
    parser.add_argument("--max-concurrency", type=int, default=16)
    parser.add_argument("--many-shards", type=int, default=10_000)
    parser.add_argument("--many-tokens", type=int, default=1000, help="tokens per small shard")
    parser.set_defaults(shard_tokens=2_000_000, repeats=1)
    args = parser.parse_args()
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    warnings.filterwarnings("ignore", "each pass")  # the dropped partial batch is expected
    machine = machine_info()
    with tempfile.TemporaryDirectory() as tmp, S3Server(process=True) as server:
        work = Path(tmp)
        rows = throughput_rows(args, server, work)
        emit(
            args,
            "Remote storage: tokens/s from loopback S3 (moto) vs local files",
            rows,
            [
                ("case", "case", ""),
                ("latency", "added latency ms", ".0f"),
                ("prefetch", "prefetch batches", ""),
                ("whole", "whole shards", ""),
                ("mtok", "M input tokens/s", ".2f"),
                ("ratio", "ratio to local", ".3f"),
            ],
            [
                f"Corpus: {args.shards} NPY shards of {args.shard_tokens} uint32 tokens, "
                f"seq_len {args.seq_len}, shuffled; batch {args.batch_size}, {args.workers} "
                f"thread workers; {args.batches} timed batches after 1 warm-up; median of "
                f"{args.repeats}.",
                "cold = empty cache folder (every window fetched as an exact byte range); "
                "warm = the same cache folder read again (disk cache hits); whole shards = "
                "storage.whole_shard_size above the shard size (one request per shard).",
            ],
            machine,
        )
        rows = first_batch_rows(args, server, work)
        emit(
            args,
            f"Remote storage: time to first batch with {args.many_shards} shards",
            rows,
            [
                ("case", "case", ""),
                ("shards", "shards", ""),
                ("seconds", "build + first batch s", ".2f"),
            ],
            [
                f"Raw uint16 shards of {args.many_tokens} tokens (format and dtype given, so no "
                "header is read); one listing call; seq_len 64, batch 8."
            ],
            machine,
        )


if __name__ == "__main__":
    main()
