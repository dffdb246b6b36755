"""``python -m shardcompat``."""

import sys

from .cli import main

sys.exit(main())
