"""Tests of ``streamload.remote``."""
