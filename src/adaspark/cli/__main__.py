"""``python -m adaspark.cli``: the ``adaspark`` command."""

import sys

from adaspark.cli import main

sys.exit(main())
