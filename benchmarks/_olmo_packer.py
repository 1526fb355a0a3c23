"""OLMo-core's packer (``olmo_core.data.utils.InstancePacker``, its OBFD) on given documents,
in this process when ``olmo_core`` imports, else in another Python that has it (a scratch
venv: ``python3 -m venv /tmp/olmo && /tmp/olmo/bin/pip install ai2-olmo-core torch``).

OLMo-core's own rules are kept: documents longer than ``sequence_length`` are fragmented into
pieces of ``sequence_length`` tokens (``LongDocStrategy.fragment``, as
``PackingInstanceSource`` builds its document indices), and an instance holds
``sequence_length`` tokens (its segment tree needs a power of two).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["olmo_fragments", "olmo_pack", "olmo_python"]

_CHILD = r"""
import json, sys, time
from importlib.metadata import version
import numpy as np
from olmo_core.data.utils import InstancePacker

sizes = np.load(sys.argv[1])
seq_len = int(sys.argv[2])
ends = np.cumsum(sizes)
indices = np.stack([ends - sizes, ends], axis=1).astype(np.uint64)
began = time.perf_counter()
packer = InstancePacker(seq_len)
instances, _, tokens = packer.pack_documents(indices)
seconds = time.perf_counter() - began
print(json.dumps({"instances": len(instances), "tokens": int(tokens), "seconds": seconds,
                  "version": version("ai2-olmo-core")}))
"""


def olmo_python(given: str | None) -> str | None:
    """The Python to run OLMo-core's packer with: this one when ``olmo_core`` imports, else
    ``given``, ``$OLMO_PYTHON`` or ``/tmp/olmo/bin/python`` where it exists; ``None``: none."""
    try:
        import olmo_core.data.utils  # noqa: F401
    except ImportError:
        pass
    else:
        return sys.executable
    for path in (given, os.environ.get("OLMO_PYTHON"), "/tmp/olmo/bin/python"):
        if path and Path(path).exists():
            return path
    return None


def olmo_fragments(doc_sizes: np.ndarray, seq_len: int) -> np.ndarray:
    """Lengths of the documents OLMo-core packs: each longer one cut every ``seq_len`` tokens
    (``range(start, end, seq_len)``), in document order."""
    sizes = np.asarray(doc_sizes, dtype=np.int64)
    pieces = -(-sizes // seq_len)
    first = np.repeat(np.cumsum(pieces) - pieces, pieces)
    k = np.arange(int(pieces.sum())) - first
    return np.minimum(seq_len, np.repeat(sizes, pieces) - k * seq_len)


def olmo_pack(fragments: np.ndarray, seq_len: int, python: str) -> dict[str, Any]:
    """``{"instances", "tokens", "seconds", "version"}`` of OLMo-core's ``InstancePacker``
    over ``fragments`` (each <= ``seq_len``), timed inside the process that runs it."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "sizes.npy"
        np.save(path, np.asarray(fragments, dtype=np.int64))
        done = subprocess.run(
            [python, "-c", _CHILD, str(path), str(seq_len)],
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))
