"""Test-wide markers: `gpu` tests skip on machines without CUDA, with the reason."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (marked gpu); none on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
