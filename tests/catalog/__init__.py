"""Tests of ``streamload.catalog``."""
