"""Tests of ``streamload.plan``."""
