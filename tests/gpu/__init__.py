"""CUDA paths the CPU suite cannot reach; every test is marked ``gpu`` (skips without CUDA).

Run them with ``nox -s gpu`` (or ``python -m pytest -m gpu``) on a machine with a GPU.  They
run world size 1 with NCCL everywhere and world size 2 where two GPUs exist (NCCL refuses two
ranks on one device).
"""

from __future__ import annotations


def world_sizes() -> list[int]:
    """The NCCL world sizes this machine can run: 1, and 2 with two GPUs."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return [1, 2] if count >= 2 else [1]
