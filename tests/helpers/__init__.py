"""Shared test helpers: corpora on disk, shard and mask checks, a tiny tokenizer, gloo ranks.

Import them by their full name (``from tests.helpers.corpus import write_shards``).
"""
