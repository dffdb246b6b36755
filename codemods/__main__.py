"""``python -m codemods``: the ``shardcompat-migrate`` command."""

import sys

from .cli import main

sys.exit(main())
