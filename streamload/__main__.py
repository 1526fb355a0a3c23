"""``python -m streamload``: the same command line as the ``streamload`` console script."""

from streamload.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
