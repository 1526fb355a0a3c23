"""Tests of ``streamload.streams``."""
