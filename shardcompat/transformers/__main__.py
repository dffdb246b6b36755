"""``python -m shardcompat.transformers script.py ARGS``: run a Trainer script with the drop-ins."""

import sys

from ._cli import main

sys.exit(main())
