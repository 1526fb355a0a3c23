"""NumPy ``.npy`` shards and headerless token files (raw dumps, tatm ``.bin``).

* ``npy`` — real ``.npy`` files (``format = "numpy"``);
* ``raw`` — headerless files, their dtype from the config or tatm metadata, tatm zero tails;
* ``folder`` — write a folder of ``.npy`` shards (KempnerForge / nanoGPT style).

tatm's ``metadata.yaml`` is read at the root (``streamload.formats.tatm_metadata``): the
catalog reads it per folder before any format is chosen.
"""
