"""States saved by earlier streamload versions still load and continue exactly (issue 30,
"one state"): the committed states of every entry point and mode (``tests/golden/states/``,
written by ``tests/golden/make_state_goldens.py`` at the commit each file names) are loaded
into fresh loaders of this version, whose remaining batches of the pass must equal the
uninterrupted run's.

One exception, on purpose: mixtures and vsl decide their ties by exact integer rules since
issue 36 (item 19), where the states of ``v1`` were saved under float rules; a state whose
fingerprint predates the rule is refused, naming it (``mixture_rule``, ``vsl.rule``), rather
than resumed on other ties. (The node chain's ``v1`` states carry no fingerprint: they load.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from streamload import StateError
from streamload.testing import assert_batches_equal
from tests.golden.state_cases import ENTRY_POINTS, configs

pytestmark = [
    pytest.mark.filterwarnings("ignore:each pass of"),
    pytest.mark.filterwarnings("ignore:the stream ended"),
    pytest.mark.filterwarnings("ignore:.set_vital. is deprecated"),
]

STATES = Path(__file__).parent / "golden" / "states"
RULE_CHANGED = {("v1", "mixture"), ("v1", "mixture-accum"), ("v1", "vsl")}
"""(version, case) of states saved under the float tie rules before issue 36 item 19."""
CASES = sorted(STATES.glob("v*/*.json"))


@pytest.fixture(scope="module")
def cfgs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return configs(tmp_path_factory.mktemp("state-goldens"))


def test_every_entry_point_and_case_has_committed_states() -> None:
    named = {f"{e}-{c}" for e, (cases, _) in ENTRY_POINTS.items() for c in cases}
    assert named <= {path.stem for path in CASES}


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_saved_state_continues_exactly(cfgs: dict[str, dict[str, Any]], path: Path) -> None:
    entry, case = path.stem.split("-", 1)
    make = ENTRY_POINTS[entry][1]
    record = json.loads(path.read_text())
    whole = [{k: v.clone() for k, v in b.items()} for b in make(cfgs[case], case)]
    refused = (path.parent.name, case) in RULE_CHANGED and not entry.startswith("chain")
    for after, state in zip(record["after"], record["states"], strict=True):
        resumed = make(cfgs[case], case)
        if refused:
            with pytest.raises(StateError, match=r"fingerprint differs.*(mixture_rule|rule)"):
                resumed.load_state_dict(state)
                list(resumed)  # StatefulDataLoader loads a dataset's state when it iterates
            continue
        resumed.load_state_dict(state)
        assert_batches_equal(whole[after:], list(resumed), f"{path.stem} after {after}")
