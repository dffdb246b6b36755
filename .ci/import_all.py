"""Import every module of the installed packages, as a bare install has them.

A module that needs an optional extra must either import (the extra is installed) or fail
with an ImportError that names the extra to install; anything else fails this check.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

PACKAGES = ("shardcompat", "codemods")
# Subpackage -> the extra it needs (its ImportError must say `pip install 'shardcompat[extra]'`).
EXTRAS = {"shardcompat.transformers": "transformers"}


def main() -> int:
    failures = []
    count = 0
    for top in PACKAGES:
        package = importlib.import_module(top)
        names = [top] + [m.name for m in pkgutil.walk_packages(package.__path__, f"{top}.")]
        for name in names:
            if name.endswith("__main__"):
                continue  # running it is the CLI, which the other steps do
            extra = next((e for prefix, e in EXTRAS.items() if name.startswith(prefix)), None)
            try:
                importlib.import_module(name)
                count += 1
            except ImportError as error:
                if extra is None or f"shardcompat[{extra}]" not in str(error):
                    failures.append(f"{name}: {type(error).__name__}: {error}")
                else:
                    print(f"{name}: needs the '{extra}' extra, and says so")
            except Exception as error:  # a module must import cleanly, whatever it needs
                failures.append(f"{name}: {type(error).__name__}: {error}")
    for failure in failures:
        print(failure, file=sys.stderr)
    print(f"imported {count} modules; {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
