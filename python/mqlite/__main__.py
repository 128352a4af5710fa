"""``python -m mqlite``: the command line."""

import sys

from mqlite.cli import main

sys.exit(main())
