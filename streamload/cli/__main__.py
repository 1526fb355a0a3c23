"""``python -m streamload.cli``."""

import sys

from streamload.cli.main import main

sys.exit(main())
