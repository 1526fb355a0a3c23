"""Tokens/s from a loopback S3 server vs the same files read locally, with and without
injected latency; and time to first batch with 10,000 shards listed.

The S3 server is s3rver (Node.js, ``npm ci --prefix benchmarks/s3rver``) or, without it, moto
(the tests' server); both run in a child process on 127.0.0.1. Latency comes from the tests'
fault proxy, also in a child process, which sleeps ``--latency`` seconds before forwarding each
request. Nothing leaves the machine.

Three ways of reading, each compared with the local files read with the same sampling config
(same batches; each loader fresh; ``--batches`` timed after one warm-up batch):

* ``exact``: uniform shuffle, every window its own byte range (the default), once per range
  client (``storage.client``: ``http`` presigned GETs on pooled connections, ``fsspec``);
* ``blocks``: ``sampling.shuffle_block`` windows per shuffle block and
  ``storage.window_reads = "blocks"``: aligned ``--block-size`` blocks, each fetched once;
* ``whole``: uniform shuffle, ``storage.whole_shard_size`` above the shard size: each shard
  fetched once into the disk cache and memory-mapped.

``cold`` starts from an empty cache folder; ``warm`` reads the same folder again.

Example:
    npm ci --prefix benchmarks/s3rver && python benchmarks/remote.py --latency 0.05
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gc
import os
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _common import add_common_args, emit, machine_info, median
from _servers import S3RVER_BIN, ProxyProcess, s3_server

import streamload
from streamload.config.storage import StorageConfig
from streamload.remote.fetch import RangeFetcher
from streamload.remote.handle import RemoteObject
from streamload.remote.http_client import http_client_for
from streamload.remote.stats import RemoteStats
from streamload.remote.store import RemoteStore
from streamload.remote.versions import object_version

CASES = (("exact", "http"), ("exact", "fsspec"), ("blocks", "auto"), ("whole", "auto"))
"""(window_reads, storage.client) of each remote case; local reads run once per window_reads."""


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


def time_loader(
    config: dict[str, Any], batch_size: int, batches: int, workers: int, step: float = 0.0
) -> float:
    """Input tokens/s over ``batches`` batches after one warm-up batch; ``step`` seconds of
    simulated training (a sleep, as a GPU step leaves the loader's threads the CPU) follow
    each batch."""
    loader = streamload.build_loader(config, batch_size=batch_size, num_workers=workers)
    with loader:
        it = iter(loader)
        next(it)
        # A full collection of this process's heap (torch, botocore: ~300k objects) takes
        # ~130 ms; one landing in a short timed run (100 exact batches take ~50 ms warm)
        # would be measured instead of the loader. Collect first, for every case alike.
        gc.collect()
        began = time.perf_counter()
        for _ in range(batches):
            batch = next(it)
            if step:
                time.sleep(step)
        took = time.perf_counter() - began
    # The planner's prefetch outlives the loader for what it requested ahead; let it land
    # (in the disk cache) before the next case, so a "warm" run is not timed beside the
    # previous run's fetches.
    for store in RemoteStore.all_stores():
        store.drain()
    return batches * batch["input_ids"].numel() / took


def read_config(args: argparse.Namespace, reads: str, step: float) -> tuple[dict, dict, int]:
    """Sampling table, storage options and timed batches of one way of reading (the stream
    repeats the corpus, so a timed run may span several epochs)."""
    batches = args.step_batches if step else args.batches
    sampling: dict[str, Any] = {"num_samples": 10**9}
    if reads == "exact":  # a request per window: few batches, or a run takes minutes
        return sampling, {"window_reads": "exact"}, args.exact_batches
    if reads == "blocks":
        storage = {"window_reads": "blocks", "block_size": args.block_size}
        return {**sampling, "shuffle_block": args.shuffle_block}, storage, batches
    return sampling, {"whole_shard_size": 1 << 40}, batches


def remote_rows(
    args: argparse.Namespace, base: dict, options: dict, case: tuple[str, str], step: float,
    work: Path,
) -> list[dict]:  # fmt: skip
    """Cold and warm rows of one way of reading with these s3fs ``options``."""
    reads, client = case
    sampling, storage, batches = read_config(args, reads, step)
    rows = []
    for prefetch in (args.prefetch_batches, 0):
        cold, warm = [], []
        for _ in range(args.repeats):
            config = {
                **base,
                "sampling": sampling,
                "storage": {
                    "cache_dir": tempfile.mkdtemp(dir=work),
                    "prefetch_batches": prefetch,
                    "max_concurrency": args.max_concurrency,
                    "memory_size": args.memory_size,
                    "client": client,
                    **storage,
                },
            }
            config["sources"] = [{"name": "bench", "path": args.url, "storage_options": options}]
            cold.append(time_loader(config, args.batch_size, batches, args.workers, step))
            warm.append(time_loader(config, args.batch_size, batches, args.workers, step))
        for name, values in (("cold", cold), ("warm", warm)):
            rows.append(
                {
                    "reads": reads,
                    "client": client,
                    "prefetch": prefetch,
                    "cache": name,
                    "mtok": median(values) / 1e6,
                }
            )
    return rows


def throughput_rows(args: argparse.Namespace, server: Any, work: Path) -> list[dict]:
    paths = write_corpus(work / "corpus", args.shards, args.shard_tokens)
    args.url = server.upload_folder(work / "corpus", "bench", uuid.uuid4().hex[:8])
    base = {
        "seq_len": args.seq_len,
        "seed": 1234,
        "sources": [{"name": "bench", "path": [str(p) for p in paths]}],
    }
    rows = []
    for step in (0.0, args.step_ms / 1000):
        local = {}
        for reads in dict.fromkeys(reads for reads, _ in CASES):
            sampling, _, batches = read_config(args, reads, step)
            config = {**base, "sampling": sampling}
            values = [
                time_loader(config, args.batch_size, batches, args.workers, step)
                for _ in range(args.repeats)
            ]
            local[reads] = median(values) / 1e6
        for latency in (0.0, args.latency):
            proxy = ProxyProcess(server.endpoint, latency) if latency else None
            endpoint = proxy.endpoint if proxy else server.endpoint
            try:
                for case in CASES:
                    options = server.storage_options(endpoint)
                    for row in remote_rows(args, base, options, case, step, work):
                        row.update(step=step * 1000, latency=latency * 1000, local=local[case[0]])
                        row["ratio"] = row["mtok"] / row["local"]
                        rows.append(row)
                        print(row, file=sys.stderr, flush=True)
            finally:
                if proxy is not None:
                    proxy.__exit__()
    return rows


def _many_shards(args: argparse.Namespace, server: Any, folder: Path, npy: bool) -> str:
    """``--many-shards`` small shards (raw ``.bin`` or ``.npy``) in ``folder``, uploaded;
    returns their ``s3://`` prefix."""
    folder.mkdir()
    tokens = np.arange(args.many_tokens, dtype=np.uint16)
    for i in range(args.many_shards):
        if npy:
            np.save(folder / f"part_{i:05d}.npy", tokens)
        else:
            tokens.tofile(folder / f"part_{i:05d}.bin")
    client, prefix = server.client(), uuid.uuid4().hex[:8]
    if "many" not in [b["Name"] for b in client.list_buckets().get("Buckets", [])]:
        client.create_bucket(Bucket="many")
    began = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        paths = sorted(folder.iterdir())
        list(pool.map(lambda p: client.upload_file(str(p), "many", f"{prefix}/{p.name}"), paths))
    took = time.perf_counter() - began
    print(f"uploaded {args.many_shards} shards in {took:.1f} s", file=sys.stderr)
    return f"s3://many/{prefix}"


def _first_batch(path: str, options: dict, raw: bool, cache: str) -> float:
    source = {"name": "many", "path": path, "storage_options": options}
    if raw:
        source.update(format="raw", dtype="uint16")
    config = {"seq_len": 64, "sources": [source], "storage": {"cache_dir": cache}}
    began = time.perf_counter()
    with streamload.build_loader(config, batch_size=8) as loader:
        next(iter(loader))
    return time.perf_counter() - began


def first_batch_rows(args: argparse.Namespace, server: Any, work: Path) -> list[dict]:
    """Build + first batch over ``--many-shards`` shards: raw shards with format and dtype
    given (no header to read), and NPY shards (a header each) with an empty cache folder and
    again with the catalog cached by the previous start-up."""
    options = server.storage_options()
    rows = []
    for raw in (True, False):
        folder = work / ("many_raw" if raw else "many_npy")
        url = _many_shards(args, server, folder, npy=not raw)
        kind = "raw, format and dtype given" if raw else "npy"
        cases = [("local", str(folder), {}, False), ("s3", url, options, False)]
        if not raw:
            cases.append(("s3, catalog cached", url, options, True))
        for name, path, opts, warm in cases:
            seconds = []
            for _ in range(args.repeats):
                cache = tempfile.mkdtemp(dir=work)
                if warm:
                    _first_batch(path, opts, raw, cache)  # a previous start-up
                seconds.append(_first_batch(path, opts, raw, cache))
            rows.append({"case": f"{name} ({kind})", "shards": args.many_shards,
                         "seconds": median(seconds)})  # fmt: skip
    return rows


def _fetcher(fs: Any, client: str, concurrency: int) -> RangeFetcher:
    config = StorageConfig(client=client, max_concurrency=concurrency)
    return RangeFetcher(fs, config, RemoteStats(), http_client_for(fs, "s3", {}, config))


def _timed(fn: Callable[[], Any]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def client_rows(args: argparse.Namespace) -> list[dict]:
    """Per server and ``storage.client``, through streamload's ``RangeFetcher`` (timeouts,
    retries and counting included): 8 KiB range GETs one at a time (wall, this process's
    CPU), then 16 at a time (requests/s: what bounds exact window reads), and 4 MiB GETs
    16 at a time (MB/s: what bounds block and whole-shard reads)."""
    import s3fs

    rows = []
    kinds = ["s3rver", "moto"] if S3RVER_BIN.exists() else ["moto"]
    for kind in kinds:
        with s3_server(kind) as server:
            server.client().create_bucket(Bucket="probe")
            fs = s3fs.S3FileSystem(**server.storage_options())
            fs.pipe("probe/x.bin", np.random.default_rng(0).bytes(64 << 20))
            info = fs.info("probe/x.bin")
            obj = RemoteObject("s3://probe/x.bin", info["size"], object_version(info))
            count = args.probe_requests
            small = [(i * 57_344, i * 57_344 + 8192) for i in range(count)]
            blocks = [((i % 16) << 22, ((i % 16) + 1) << 22) for i in range(64)]
            for client in ("http", "fsspec"):
                row = _probe(_fetcher(fs, client, 16), obj, small, blocks)
                rows.append({"server": server.name, "client": client, **row})
    return rows


def _probe(
    fetcher: RangeFetcher, obj: RemoteObject, small: list[tuple[int, int]],
    blocks: list[tuple[int, int]],
) -> dict[str, float]:  # fmt: skip
    def each(span: tuple[int, int]) -> bytes:
        return fetcher.fetch(obj, *span)

    each((0, 8192))  # connect once
    wall, cpu = _timed(lambda: [each(span) for span in small])
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        many, _ = _timed(lambda: list(pool.map(each, small)))
        big, _ = _timed(lambda: list(pool.map(each, blocks)))
    fetcher.close()
    count = len(small)
    return {"wall": 1000 * wall / count, "cpu": 1000 * cpu / count, "rps": count / many,
            "mbs": sum(b - a for a, b in blocks) / 1e6 / big}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    add_common_args(parser)
    parser.add_argument("--server", choices=["auto", "s3rver", "moto"], default="auto")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--batches", type=int, default=6000, help="timed batches per case")
    parser.add_argument("--step-batches", type=int, default=1500, help="... with a train step")
    parser.add_argument("--exact-batches", type=int, default=100, help="... of exact reads")
    parser.add_argument("--workers", type=int, default=2, help="thread workers")
    parser.add_argument("--latency", type=float, default=0.05, help="injected seconds")
    parser.add_argument("--step-ms", type=float, default=2.0, help="simulated training step")
    parser.add_argument("--prefetch-batches", type=int, default=64)
    parser.add_argument("--max-concurrency", type=int, default=16)
    parser.add_argument("--shuffle-block", type=int, default=4096, help="windows per block")
    parser.add_argument("--block-size", type=int, default=4 << 20, help="bytes per read block")
    parser.add_argument("--memory-size", type=int, default=64 << 20, help="memory LRU bytes")
    parser.add_argument("--parts", default="throughput,client,listing",
                        help="comma-separated: throughput, client, listing")  # fmt: skip
    parser.add_argument("--probe-requests", type=int, default=200, help="serial GETs (client)")
    parser.add_argument("--many-shards", type=int, default=10_000)
    parser.add_argument("--many-tokens", type=int, default=1000, help="tokens per small shard")
    parser.set_defaults(shard_tokens=4_000_000, repeats=1)
    args = parser.parse_args()
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    warnings.filterwarnings("ignore", "each pass")  # the dropped partial batch is expected
    machine = machine_info()
    parts = set(args.parts.split(","))
    if "throughput" in parts:
        throughput_part(args, machine)
    if "client" in parts:
        emit(
            args,
            "Remote storage: what each range client gets from each loopback S3 server",
            client_rows(args),
            [
                ("server", "server", ""),
                ("client", "storage.client", ""),
                ("wall", "8 KiB range GET ms (serial)", ".2f"),
                ("cpu", "client CPU ms per GET", ".2f"),
                ("rps", "8 KiB GETs x16 per s", ".0f"),
                ("mbs", "4 MiB GETs x16 MB/s", ".0f"),
            ],
            [
                f"RangeFetcher.fetch on a 64 MiB object: {args.probe_requests} serial 8 KiB "
                "ranges (wall and this process's CPU per request; the server runs in its own "
                "process), the same ranges on 16 threads, then 64 ranges of 4 MiB on 16 threads.",
                "http = presigned URL (signed once) over pooled urllib3 connections; fsspec = "
                "s3fs cat_file.",
            ],
            machine,
        )
    if "listing" in parts:
        listing_part(args, machine)


def throughput_part(args: argparse.Namespace, machine: Any) -> None:
    server = s3_server(args.server)
    with tempfile.TemporaryDirectory() as tmp, server:
        work = Path(tmp)
        rows = throughput_rows(args, server, work)
        emit(
            args,
            f"Remote storage: tokens/s from loopback S3 ({server.name}) vs local files",
            rows,
            [
                ("step", "train step ms", ".0f"),
                ("reads", "reads", ""),
                ("client", "client", ""),
                ("latency", "added latency ms", ".0f"),
                ("prefetch", "prefetch batches", ""),
                ("cache", "cache", ""),
                ("mtok", "M input tokens/s", ".2f"),
                ("local", "local M tokens/s", ".2f"),
                ("ratio", "ratio to local", ".3f"),
            ],
            [
                f"Corpus: {args.shards} NPY shards of {args.shard_tokens} uint32 tokens "
                f"({args.shards * args.shard_tokens * 4 >> 20} MiB), seq_len {args.seq_len}; "
                f"batch {args.batch_size}, {args.workers} thread workers; {args.batches} timed "
                f"batches ({args.step_batches} with a train step, {args.exact_batches} for "
                "exact; the corpus repeats) after 1 warm-up; median of "
                f"{args.repeats}; memory LRU {args.memory_size >> 20} MiB.",
                "exact = uniform shuffle, one range request per window (coalesced within 64 "
                f"KiB); blocks = sampling.shuffle_block {args.shuffle_block} with "
                f"storage.window_reads = 'blocks' of {args.block_size >> 20} MiB; whole = "
                "uniform shuffle, each shard fetched once into the disk cache and mapped.",
                "local = the same files and sampling config read from local disk in the same "
                "run; cold = empty cache folder; warm = the same cache folder again; train "
                "step = a sleep after each batch (a GPU step leaves the CPU to the loader).",
            ],
            machine,
        )


def listing_part(args: argparse.Namespace, machine: Any) -> None:
    # s3rver 3.7.1 answers InternalError to a listing past its first page of 1000 keys, so the
    # listing benchmark runs against moto.
    with tempfile.TemporaryDirectory() as tmp, s3_server("moto") as server:
        rows = first_batch_rows(args, server, Path(tmp))
        emit(
            args,
            f"Remote storage: time to first batch with {args.many_shards} shards ({server.name})",
            rows,
            [
                ("case", "case", ""),
                ("shards", "shards", ""),
                ("seconds", "build + first batch s", ".2f"),
            ],
            [
                f"Shards of {args.many_tokens} uint16 tokens: raw with format and dtype given (no "
                "header is read), or NPY (a header each, read concurrently; 'catalog cached': "
                "a previous start-up over the same objects left their descriptions in the "
                "cache folder). One listing call; seq_len 64, batch 8."
            ],
            machine,
        )


if __name__ == "__main__":
    main()
