"""Small helpers every layer may use (the bottom layer, beside :mod:`streamload.errors`)."""
