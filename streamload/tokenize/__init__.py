"""``streamload tokenize``: JSONL documents → token files of every format, like ``dolma tokens``.

Modules: :mod:`~streamload.tokenize.config` (the run's options), :mod:`.inputs` (JSONL files,
compressed, over fsspec), :mod:`.encoder` (the ``tokenizers`` wrapper with dolma's BOS/EOS
rules), :mod:`.shuffle` (groups, ring, seeded batch shuffle), :mod:`.outputs` (dtype and
file rolling through the format writers), :mod:`.markers` (resume bookkeeping),
:mod:`.group` (one group's work), :mod:`.lock` (one run per destination shard) and
:mod:`.run` (planning, processes that die with the run through
:mod:`streamload.util.lifeline`, summary).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamload.util.lazy import lazy_attributes

if TYPE_CHECKING:
    from streamload.formats.encoder import DocumentEncoder
    from streamload.tokenize.config import OutputFormat, TokenizeConfig
    from streamload.tokenize.run import RunPlan, RunSummary, plan_run, run_plan, tokenize

# The run imports the format writers and numpy; the CLI's parser needs only the options
# (`tokenize.config`), so these names load on first use.
_LAZY = {
    "DocumentEncoder": "streamload.formats.encoder",
    "OutputFormat": "streamload.tokenize.config",
    "RunPlan": "streamload.tokenize.run",
    "RunSummary": "streamload.tokenize.run",
    "TokenizeConfig": "streamload.tokenize.config",
    "plan_run": "streamload.tokenize.run",
    "run_plan": "streamload.tokenize.run",
    "tokenize": "streamload.tokenize.run",
}


__getattr__ = lazy_attributes(__name__, globals(), _LAZY)


__all__ = [
    "DocumentEncoder",
    "OutputFormat",
    "RunPlan",
    "RunSummary",
    "TokenizeConfig",
    "plan_run",
    "run_plan",
    "tokenize",
]
