"""``streamload tokenize``: JSONL documents → token files of every format, like ``dolma tokens``.

Modules: :mod:`~streamload.tokenize.config` (the run's options), :mod:`.inputs` (JSONL files,
compressed, over fsspec), :mod:`.encoder` (the ``tokenizers`` wrapper with dolma's BOS/EOS
rules), :mod:`.shuffle` (groups, ring, seeded batch shuffle), :mod:`.outputs` (dtype and
file rolling through the format writers), :mod:`.markers` (resume bookkeeping),
:mod:`.group` (one group's work), :mod:`.lock` (one run per destination shard) and
:mod:`.run` (planning, processes that die with the run through
:mod:`streamload.util.lifeline`, summary).
"""

from streamload.formats.encoder import DocumentEncoder
from streamload.tokenize.config import OutputFormat, TokenizeConfig
from streamload.tokenize.run import RunPlan, RunSummary, plan_run, run_plan, tokenize

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
