"""Offline work over datasets, not on the loader's path: documents of a shard
(``documents``), format conversion (``convert``), the realized-mixture report (``report``)
and the demo (``demo``). The CLI's subcommands are thin wrappers over these."""
