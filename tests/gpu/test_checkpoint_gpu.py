"""Checkpoints on CUDA: full state dicts gathered with ``cpu_offload`` (rank 0 only), offloaded
shards, DCP shards written from GPU memory; each resumed into a model built from another seed
must continue exactly like the uninterrupted run.

On CPU, ``StateDictOptions(cpu_offload=True)`` is never used (it crashes without an
accelerator, pytorch#188989), so this is the only place that path runs.  Tolerance:
RESUME_TOL (1e-4; the same kernels on both sides, but CUDA attention backward is not bit-exact).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import torch

from shardcompat.backends import get
from shardcompat.launch import spawn
from tests._parity import OPTIMIZERS, batch, build_model, loss_fn, max_diff
from tests.gpu import world_sizes

pytestmark = pytest.mark.gpu
RESUME_TOL = 1e-4
# (saved by, its options, resumed by, its options, sharded format)
RESUMES = [
    ("torch-zero", "zero_dp_1", "torch-zero", "zero_dp_1", False),
    ("torch-fsdp1", "zero_dp_3 auto_wrap", "torch-fsdp1", "zero_dp_3 auto_wrap", False),
    ("torch-fsdp1", "zero_dp_3 offload", "torch-fsdp1", "zero_dp_3 offload", False),
    ("torch-fsdp1", "zero_dp_2", "torch-fsdp1", "zero_dp_2", True),
    ("torch-fsdp2", "zero_dp_3 offload", "torch-fsdp2", "zero_dp_3 offload", False),
    ("torch-fsdp2", "zero_dp_3 auto_wrap", "torch-fsdp2", "zero_dp_3 auto_wrap", True),
    ("torch-fsdp2", "zero_dp_3 auto_wrap", "torch-fsdp1", "zero_dp_3 offload", False),
    ("fairscale-sdp", "simple", "fairscale-sdp", "simple", False),
    ("fairscale-fsdp", "zero_dp_3 auto_wrap offload", "fairscale-fsdp", "zero_dp_3 auto_wrap offload", False),
    ("fairscale-fsdp", "zero_dp_3 auto_wrap", "torch-fsdp2", "zero_dp_3 offload", False),
]
USABLE = [r for r in RESUMES if get(r[0]).probe() and get(r[2]).probe()]


def _train(prepared: Any, rank: int, start: int, steps: int) -> list[float]:
    import torch.distributed as dist

    device = torch.device("cuda", torch.cuda.current_device())
    losses = []
    for step in range(start, start + steps):
        x, y = (t.to(device) for t in batch("blocks", rank, step))
        loss = loss_fn("blocks", prepared(x), y)
        prepared.backward(loss)
        prepared.clip_grad_norm_(1.0)
        prepared.step()
        prepared.zero_grad()
        total = loss.detach().float().reshape(1)
        dist.all_reduce(total)
        losses.append(float(total) / dist.get_world_size())
    return losses


def _resume(rank: int, n: int, spec: tuple[str, str, str, str, bool], directory: str) -> dict[str, Any]:
    import shardcompat

    saver, saver_options, loader, loader_options, sharded = spec
    straight = shardcompat.prepare(build_model("blocks", 0), OPTIMIZERS["adamw"], saver_options, backend=saver)
    _train(straight, rank, 0, 2)
    path = Path(directory, f"ckpt{n}")
    straight.save_checkpoint(path, sharded=sharded)
    resumed = shardcompat.prepare(build_model("blocks", 1), OPTIMIZERS["adamw"], loader_options, backend=loader)
    extra = resumed.load_checkpoint(path)
    saved_on_cpu = None
    if rank == 0 and not sharded:
        saved = torch.load(path / "model.pt", weights_only=True)
        saved_on_cpu = all(t.device.type == "cpu" for t in saved.values())
    return {"straight": _train(straight, rank, 2, 2), "resumed": _train(resumed, rank, 2, 2),
            "params": (straight.full_state_dict(), resumed.full_state_dict()),
            "step": extra["step"], "saved_on_cpu": saved_on_cpu}


def _job(rank: int, world_size: int, directory: str) -> list[dict[str, Any] | str]:
    """Every resume in one process group; one that raises is reported as its error, not a crash."""
    import torch.distributed as dist

    out: list[dict[str, Any] | str] = []
    for n, spec in enumerate(USABLE):
        try:
            out.append(_resume(rank, n, spec, directory))
        except Exception as error:
            out.append(f"{type(error).__name__}: {error}")
            dist.barrier()
    return out


@functools.cache
def _results(nprocs: int, directory: str) -> list[dict[str, Any] | str]:
    return spawn(_job, nprocs, (directory,), backend="nccl", timeout=400)[0]  # type: ignore[no-any-return]


@pytest.mark.timeout(420)
@pytest.mark.parametrize("nprocs", world_sizes())
@pytest.mark.parametrize("spec", USABLE, ids=lambda s: f"{s[0]}-{s[1]}->{s[2]}-{s[3]}{'-sharded' if s[4] else ''}")
def test_resume_on_cuda_continues_the_uninterrupted_run(
    spec: tuple[str, str, str, str, bool], nprocs: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    got = _results(nprocs, str(tmp_path_factory.getbasetemp() / f"ckpt-{nprocs}"))[USABLE.index(spec)]
    assert not isinstance(got, str), got
    diff = max(abs(a - b) for a, b in zip(got["straight"], got["resumed"]))
    assert diff <= RESUME_TOL, (got["straight"], got["resumed"])
    assert max_diff(*got["params"]) <= RESUME_TOL
    assert got["step"] == 2
    if not spec[4]:
        assert got["saved_on_cpu"] is True, "the full checkpoint must hold CPU tensors (cpu_offload)"
