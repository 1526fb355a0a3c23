"""Tests of ``streamload.formats``."""
