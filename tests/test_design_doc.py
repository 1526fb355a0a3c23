"""docs/design.md is the map of the package (issue 30): every module path it names exists.

Checked: file paths with a folder (``streams/cursor.py``, ``tests/remote/test_x.py``,
``benchmarks/x.py``), resolved against the repository, the package, or one of its folders
(``arrow/folder.py`` in the formats section); dotted module
paths (``streamload.streams.cursor``, also ``streamload.plan.mixture.replay_cursor``: a
module and an attribute, which must exist too).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
FILE = re.compile(r"(?<![\w./-])((?:[a-z_][\w-]*/)+[a-z_][\w]*\.(?:py|md|toml))\b")
DOTTED = re.compile(r"\bstreamload(?:\.[A-Za-z_]\w*)+")


def named_files() -> list[str]:
    return sorted(set(FILE.findall(DESIGN.read_text())))


def named_modules() -> list[str]:
    return sorted(set(DOTTED.findall(DESIGN.read_text())))


@pytest.mark.parametrize("path", named_files())
def test_every_file_it_names_exists(path: str) -> None:
    # a path inside a folder's section may start at that folder (``arrow/folder.py`` in the
    # formats section): one folder of the package down is accepted too
    places = [ROOT / path, ROOT / "streamload" / path, *ROOT.glob(f"streamload/*/{path}")]
    assert any(place.exists() for place in places), f"docs/design.md names {path}: not found"


@pytest.mark.parametrize("dotted", named_modules())
def test_every_module_it_names_imports(dotted: str) -> None:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        target = module
        for name in parts[cut:]:
            assert hasattr(target, name), f"docs/design.md names {dotted}: no {name}"
            target = getattr(target, name)
        return
    pytest.fail(f"docs/design.md names {dotted}, which does not import")
