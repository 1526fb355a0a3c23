"""streamload's tests, laid out like the package: ``tests/<layer>/test_<module>.py``.

Shared helpers are in :mod:`tests.helpers`, the loopback storage servers in
:mod:`tests.servers`. Every test folder is a package, so pytest puts the repository root on
``sys.path`` and equal file names in two folders do not clash; import helpers by their full
name (``from tests.helpers.corpus import write_shards``).
"""
