"""Tests of ``streamload.cli``."""
