"""Write the committed loader states of every entry point and mode (tests/golden/states/).

Run from the repository root of the streamload version whose states are to be kept loadable
(the states of main before the one-state envelope were written by commit f11e48b):

    git worktree add /tmp/old f11e48b && cp -r tests/golden/state_cases.py \
        tests/golden/make_state_goldens.py /tmp/old/tests/golden/ && cd /tmp/old && \
        python -m tests.golden.make_state_goldens /path/to/repo/tests/golden/states/v1

Each file ``ENTRY-CASE.json`` holds ``{"after": [k...], "states": [state after k batches...],
"streamload": the writer's commit}``.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.golden.state_cases import AFTER, ENTRY_POINTS, configs


def main(out: str) -> None:
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        cfgs = configs(Path(tmp))
        for entry, (cases, make) in ENTRY_POINTS.items():
            for case in cases:
                afters, states = [], []
                for after in AFTER:
                    loader = make(cfgs[case], case)
                    iterator = iter(loader)
                    taken = sum(1 for _, _ in zip(range(after), iterator, strict=False))
                    if taken == after:  # a short pass keeps its earlier save points only
                        afters.append(after)
                        states.append(copy.deepcopy(loader.state_dict()))
                    del iterator, loader
                path = folder / f"{entry}-{case}.json"
                record = {"after": afters, "states": states, "streamload": commit}
                path.write_text(json.dumps(record, indent=1, sort_keys=True, default=int) + "\n")
                print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1])
