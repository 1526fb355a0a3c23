"""Tests of ``streamload.tokenize``."""
