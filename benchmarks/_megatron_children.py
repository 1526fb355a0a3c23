"""The code each fresh interpreter of ``benchmarks/megatron.py`` runs (``python -c``).

``MEGATRON_CHILD``: megatron-core's GPT index build, timed; ``FIRST_BATCH_CHILD``: a loader's
first batch; ``OURS_WARM_CHILD`` / ``MEGATRON_WARM_CHILD``: a warm start of streamload / of
megatron-core's dataset builder, timed after imports, with its peak resident memory above
the memory after imports and its anonymous memory growth.
"""

from __future__ import annotations

__all__ = ["FIRST_BATCH_CHILD", "MEGATRON_CHILD", "MEGATRON_WARM_CHILD", "OURS_WARM_CHILD"]

MEGATRON_CHILD = r"""
import hashlib, json, sys, time
import numpy as np
from megatron.core.datasets import helpers
from megatron.core.datasets.gpt_dataset import _build_document_index, _build_shuffle_index

def build():
    began = time.perf_counter()
    indices = np.arange(lengths.size, dtype=np.int32)
    tpe = int(lengths.sum()); extra = 1
    epochs = 1
    while epochs * tpe < num_samples * seq_len + extra:
        epochs += 1
    n_sans = ((epochs - 1) * tpe - extra) // seq_len
    n_per = (tpe - extra) // seq_len
    separate = epochs > 1 and num_samples - n_sans < int(0.80 * n_per)
    rng = np.random.RandomState(seed)
    doc = _build_document_index(indices, epochs, rng, separate)
    sample = helpers.build_sample_idx(lengths, doc, seq_len, epochs, tpe, True, extra)
    total = sample.shape[0] - 1
    shuffle = _build_shuffle_index(n_sans if separate else total, total, rng)
    return doc, sample, shuffle, epochs, time.perf_counter() - began

lengths = np.load(sys.argv[1]); num_samples, seq_len, seed, repeats = map(int, sys.argv[2:6])
times = []
for _ in range(repeats):
    doc, sample, shuffle, epochs, seconds = build()
    times.append(seconds)
digest = hashlib.sha256()
for a in (doc, sample, shuffle):
    digest.update(np.ascontiguousarray(a).tobytes())
print(json.dumps({"seconds": sorted(times)[len(times) // 2], "sha": digest.hexdigest(),
                  "epochs": epochs}))
"""
_PEAK = r"""
def status(field):  # MiB
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(field)) / 1024
try:  # "5": reset the peak resident size (VmHWM) to the current one
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
except OSError:
    pass
base, anon = status("VmRSS:"), status("RssAnon:")
wall, cpu = time.perf_counter(), time.process_time()
"""
_REPORT = r"""
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
row = {"seconds": wall, "cpu_s": cpu, "peak_mib": status("VmHWM:") - base,
       "anon_mib": status("RssAnon:") - anon, "rss_mib": status("VmHWM:")}
"""
OURS_WARM_CHILD = (
    r"""
import json, sys, time
if sys.argv[2]:
    sys.path.insert(0, sys.argv[2])  # the tree measured
import importlib
from streamload import build_loader
for name in ("streamload.modes.megatron.stream", "streamload.modes.concat", "numpy.ma",
             "streamload.modes.packed", "streamload.modes.vsl", "fsspec.implementations.local",
             "zstandard"):  # what the start-up imports on first use: imports are not timed
    importlib.import_module(name)
"""
    + _PEAK
    + r"""
loader = build_loader(json.loads(sys.argv[1]), batch_size=8)
next(iter(loader))
"""
    + _REPORT
    + r"""
files = getattr(loader.stream, "_files", None) or {}
row["cache"] = ("megatron-core" if any("GPTDataset" in f for f in files.values())
                else "streamload" if files else "none")
print(json.dumps(row))
"""
)
MEGATRON_WARM_CHILD = (
    r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
import torch
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

class Tokenizer:
    unique_identifiers = {"class": "BenchTokenizer"}
    vocab_size = None
    eod = 0

prefix, cache, split = sys.argv[1:4]
num_samples, seq_len, seed = map(int, sys.argv[4:7])
"""
    + _PEAK
    + r"""
config = GPTDatasetConfig(random_seed=seed, sequence_length=seq_len, blend=([prefix], None),
                          split=split, tokenizer=Tokenizer(), reset_position_ids=False,
                          reset_attention_mask=False, eod_mask_loss=False,
                          create_attention_mask=False, path_to_cache=cache)
builder = BlendedMegatronDatasetBuilder(GPTDataset, [num_samples, 0, 0], lambda: True, config)
train = builder.build()[0]
torch.utils.data.default_collate([train[i] for i in range(8)])
"""
    + _REPORT
    + r"""
row["cache"] = "megatron-core"
print(json.dumps(row))
"""
)
FIRST_BATCH_CHILD = r"""
import json, sys, time
from streamload import build_loader
began = time.perf_counter()
loader = build_loader(json.loads(sys.argv[1]), batch_size=8)
next(iter(loader))
print(json.dumps({"seconds": time.perf_counter() - began}))
"""
