"""Local data never loads the remote machinery: ``import streamload`` and a ``build_loader``
over a NumPy folder on local disk import no remote client library and not the remote store
(fsspec's async stack, the block cache; :mod:`streamload.remote` loads them on first use).

Checked in a fresh interpreter: this test process has long imported all of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.helpers.paths import REPO

CLIENTS = ("s3fs", "gcsfs", "adlfs", "aiohttp", "requests", "botocore")
"""Client libraries of remote storage (and their HTTP stacks)."""
REMOTE = ("streamload.remote.store", "streamload.remote.block_cache", "fsspec.asyn")
"""The remote read path: pieces, the disk cache, fsspec's event loop."""

_LOAD_ONE_BATCH = """
import json, sys
watched = json.loads(sys.argv[2])
import streamload
after_import = [m for m in watched + ["torch", "numpy"] if m in sys.modules]
loader = streamload.build_loader(sys.argv[1], batch_size=2, num_workers=0)
batch = next(iter(loader))
print(json.dumps({
    "after_import": after_import,
    "after_batch": [m for m in watched if m in sys.modules],
    "first": batch["input_ids"][0].tolist(),
}))
"""


def test_a_local_loader_imports_no_remote_client(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    shards.mkdir()
    np.save(shards / "shard_00000.npy", np.arange(1000, 1300, dtype=np.uint16))
    config = tmp_path / "data.toml"
    config.write_text('seq_len = 8\nseed = 3\n[[sources]]\nname = "web"\npath = "shards/"\n')
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    watched = json.dumps([*CLIENTS, *REMOTE])
    done = subprocess.run(
        [sys.executable, "-c", _LOAD_ONE_BATCH, str(config), watched],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["after_import"] == []  # `import streamload` is configs and errors only
    assert found["after_batch"] == []
    assert len(found["first"]) == 8 and all(1000 <= t < 1300 for t in found["first"])
