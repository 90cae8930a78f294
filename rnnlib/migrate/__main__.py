"""``python -m rnnlib.migrate``: the checker's command line."""

import sys

from rnnlib.migrate import main

sys.exit(main())
