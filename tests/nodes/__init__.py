"""Tests of ``streamload.nodes``."""
