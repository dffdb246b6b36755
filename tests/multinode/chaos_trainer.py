"""``shardcompat run SCRIPT ARGS`` with one worker SIGKILLed mid-training (run by torchrun).

``SHARDCOMPAT_CHAOS=DIR;kill@RANK:STEP``: that global rank kills itself when the Trainer is
about to train optimizer step STEP (1-based, after STEP-1 are done), once per job (a marker
in DIR).  Each rank also says at which step its attempt starts training (``chaos: rank R
starts at step S``).  The script itself is unmodified; only ``Trainer.training_step`` is wrapped.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any


def main() -> int:
    import transformers

    from shardcompat.cli import main as cli

    folder, _, fault = os.environ["SHARDCOMPAT_CHAOS"].partition(";")
    rank, step = (int(x) for x in fault.removeprefix("kill@").split(":"))
    marker = Path(folder) / f"trainer-kill-at-{rank}-step-{step}"
    original = transformers.Trainer.training_step

    first: list[bool] = []

    def training_step(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not first:  # what this attempt resumed from, whatever the release logs
            first.append(True)
            print(f"chaos: rank {os.environ['RANK']} starts at step {self.state.global_step + 1}",
                  file=sys.stderr, flush=True)
        if int(os.environ["RANK"]) == rank and self.state.global_step + 1 == step:
            try:
                marker.touch(exist_ok=False)
            except FileExistsError:
                pass
            else:
                print(f"chaos: {fault} (pid {os.getpid()})", file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
        return original(self, *args, **kwargs)

    transformers.Trainer.training_step = training_step  # type: ignore[method-assign]
    return cli(["run", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
