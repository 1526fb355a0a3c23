"""Tests of ``streamload.config``."""
