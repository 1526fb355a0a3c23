"""Tests of ``streamload.ops``."""
