"""The fairscale facade on CUDA with NCCL: what only a GPU reaches, under both backings.

On CUDA the facade serves fairscale's own FSDP without the CPU layer where fairscale is
installed and works, else torch FSDP1 with fairscale's ``mixed_precision=True`` as
``MixedPrecision(fp16)`` and ``move_params_to_cpu=True`` as ``CPUOffload`` (both moot on a CPU
run); beside fairscale's OSS it serves fairscale's CUDA-only ``ShardedGradScaler``.  Each loop
is fairscale's documented one, imported from fairscale's paths with the prefix swapped, and
must train as plain DDP does (``SHARDCOMPAT_FAIRSCALE=native`` forces the torch backing).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from shardcompat.backends import get
from shardcompat.launch import spawn
from tests._parity import FP16_TOL, FP32_TOL
from tests.gpu import world_sizes

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

STEPS = 4
FSDP_CASES = {
    "fp32": {},
    "fp16": {"mixed_precision": True},
    "fp16-offload": {"mixed_precision": True, "move_params_to_cpu": True},
}
BACKINGS = ["auto", "native"]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def _losses(model: nn.Module, optimizer: Any, rank: int, scaler: Any = None) -> list[float]:
    """Plain steps on this rank's data (fp16 autocast with a scaler); the loss averaged over ranks."""
    device = torch.device("cuda", torch.cuda.current_device())
    losses = []
    for step in range(STEPS):
        generator = torch.Generator().manual_seed(1000 * rank + step)
        x, y = (torch.randn(8, n, generator=generator).to(device) for n in (16, 4))
        optimizer.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16, enabled=scaler is not None):
            loss = nn.functional.mse_loss(model(x).float(), y)
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        value = loss.detach().clone()
        dist.all_reduce(value)
        losses.append(float(value) / dist.get_world_size())
    return losses


def _ddp(rank: int, scaler: Any = None) -> list[float]:
    device = torch.device("cuda", torch.cuda.current_device())
    model = nn.parallel.DistributedDataParallel(_model().to(device), device_ids=[device.index])
    return _losses(model, torch.optim.SGD(model.parameters(), lr=0.05), rank, scaler)


def _fsdp(rank: int, world_size: int, case: str) -> dict[str, Any]:
    from shardcompat.fairscale.nn.data_parallel import FullyShardedDataParallel

    kwargs = FSDP_CASES[case]
    # fairscale's recipe: the module on its GPU, or left on CPU when its parameters are offloaded.
    module = _model() if kwargs.get("move_params_to_cpu") else _model().cuda()
    sharded = FullyShardedDataParallel(module, **kwargs)
    got = _losses(sharded, torch.optim.SGD(sharded.parameters(), lr=0.05), rank)
    return {"want": _ddp(rank), "got": got, "fairscale": _fairscales(sharded),
            "params_on": sorted({p.device.type for p in sharded.parameters()})}


def _sdp_fp16(rank: int, world_size: int) -> dict[str, Any]:
    from shardcompat.fairscale.nn.data_parallel import ShardedDataParallel
    from shardcompat.fairscale.optim.grad_scaler import ShardedGradScaler
    from shardcompat.fairscale.optim.oss import OSS

    model = _model().cuda()
    optimizer = OSS(model.parameters(), optim=torch.optim.SGD, lr=0.05)
    scaler = ShardedGradScaler()
    got = _losses(ShardedDataParallel(model, optimizer), optimizer, rank, scaler)
    return {"want": _ddp(rank, torch.amp.GradScaler("cuda")), "got": got, "fairscale": _fairscales(scaler)}


def _fairscales(obj: Any) -> bool:
    """Whether fairscale's own class serves ``obj`` (the facade may subclass it to fix a trap)."""
    return any(cls.__module__.startswith("fairscale.") for cls in type(obj).__mro__)


def _fairscale_expected(backing: str, backend: str) -> bool:
    return backing == "auto" and bool(get(backend).probe())


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backing", BACKINGS)
@pytest.mark.parametrize("case", FSDP_CASES)
def test_fsdp_on_cuda_trains_as_ddp(case: str, backing: str) -> None:
    ranks = spawn(_fsdp, world_sizes()[-1], (case,), backend="nccl", timeout=240,
                  env={"SHARDCOMPAT_FAIRSCALE": backing})
    tolerance = FP32_TOL if case == "fp32" else FP16_TOL
    for got in ranks:
        assert got["fairscale"] is _fairscale_expected(backing, "fairscale-fsdp")
        assert max(abs(a - b) for a, b in zip(got["got"], got["want"], strict=True)) <= tolerance, got
        assert got["want"][-1] < got["want"][0], "the reference did not learn; the test would prove nothing"
        if "offload" in case:
            assert got["params_on"] == ["cpu"], "move_params_to_cpu: the sharded parameters live on the host"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backing", BACKINGS)
def test_sharded_ddp_with_the_sharded_grad_scaler_on_cuda(backing: str) -> None:
    ranks = spawn(_sdp_fp16, world_sizes()[-1], backend="nccl", timeout=240, env={"SHARDCOMPAT_FAIRSCALE": backing})
    for got in ranks:
        assert got["fairscale"] is _fairscale_expected(backing, "fairscale-sdp")
        assert max(abs(a - b) for a, b in zip(got["got"], got["want"], strict=True)) <= FP16_TOL, got
